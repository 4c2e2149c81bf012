package dialin

import (
	"crypto/sha256"
	"sync"
)

// store holds the encoded classes and secrets that operations in flight reference, by digest,
// so a provider pulls exactly the version the operation was sent with (the Secret a driver
// receives is assembled per call, so no API object holds it). An entry lives while an operation
// references it and remembers which provider names it was sent for: only a peer authorized for
// one of them may pull it.
type store struct {
	mu      sync.Mutex
	entries map[digest]*entry
}

type digest = [sha256.Size]byte

type entry struct {
	raw       []byte
	refs      int
	providers map[string]int
}

func newStore() *store { return &store{entries: map[digest]*entry{}} }

// put pins raw, whose SHA-256 is d, for provider and returns the release function.
func (s *store) put(raw []byte, d digest, provider string) func() {
	s.mu.Lock()
	e, ok := s.entries[d]
	if !ok {
		e = &entry{raw: raw, providers: map[string]int{}}
		s.entries[d] = e
	}
	e.refs++
	e.providers[provider]++
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			e.refs--
			if e.providers[provider]--; e.providers[provider] == 0 {
				delete(e.providers, provider)
			}
			if e.refs == 0 {
				delete(s.entries, d)
			}
		})
	}
}

// get returns the bytes of a pinned digest and the providers it was sent for.
func (s *store) get(d []byte) ([]byte, []string, bool) {
	if len(d) != sha256.Size {
		return nil, nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[digest(d)]
	if !ok {
		return nil, nil, false
	}
	names := make([]string, 0, len(e.providers))
	for n := range e.providers {
		names = append(names, n)
	}
	return e.raw, names, true
}
