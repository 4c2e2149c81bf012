package jsoncloud

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// VM is one machine of the cloud.
type VM struct {
	ID       string            `json:"id"`
	Name     string            `json:"name"`
	Region   string            `json:"region"`
	Size     string            `json:"size"`
	Tags     map[string]string `json:"tags"`
	UserData string            `json:"userData,omitempty"`
	Created  time.Time         `json:"created"`
}

// state is the content of the cloud's file.
type state struct {
	// Token, when set, is the API token every request's secret must carry (key "token").
	Token  string        `json:"token,omitempty"`
	NextID int           `json:"nextID"`
	VMs    map[string]VM `json:"vms"`
}

// Cloud is the provider's "cloud": VMs kept in one JSON file that every change rewrites
// atomically (write a temporary file, then rename), so a crash never leaves half a file. One
// process owns a file at a time.
type Cloud struct {
	path string
	mu   sync.Mutex
}

// OpenCloud returns the cloud stored in path, creating an empty one (requiring token, when
// not empty) if the file does not exist.
func OpenCloud(path, token string) (*Cloud, error) {
	c := &Cloud{path: path}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		if err := c.save(&state{Token: token, VMs: map[string]VM{}}); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, fmt.Errorf("jsoncloud: open %s: %w", path, err)
	}
	return c, c.view(func(*state) error { return nil })
}

// VMs returns every VM, for tests and tools that look into the cloud directly.
func (c *Cloud) VMs() ([]VM, error) {
	var out []VM
	err := c.view(func(s *state) error {
		for _, vm := range s.VMs {
			out = append(out, vm)
		}
		return nil
	})
	return out, err
}

// view runs fn on the current state.
func (c *Cloud) view(fn func(*state) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, err := c.load()
	if err != nil {
		return err
	}
	return fn(s)
}

// update runs fn on the current state and stores the result when fn succeeds.
func (c *Cloud) update(fn func(*state) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, err := c.load()
	if err != nil {
		return err
	}
	if err := fn(s); err != nil {
		return err
	}
	return c.save(s)
}

func (c *Cloud) load() (*state, error) {
	b, err := os.ReadFile(c.path)
	if err != nil {
		return nil, fmt.Errorf("jsoncloud: read %s: %w", c.path, err)
	}
	var s state
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("jsoncloud: %s is not a cloud file: %w", c.path, err)
	}
	if s.VMs == nil {
		s.VMs = map[string]VM{}
	}
	return &s, nil
}

func (c *Cloud) save(s *state) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(c.path), ".jsoncloud-*")
	if err != nil {
		return fmt.Errorf("jsoncloud: write %s: %w", c.path, err)
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("jsoncloud: write %s: %w", c.path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("jsoncloud: write %s: %w", c.path, err)
	}
	if err := os.Rename(tmp.Name(), c.path); err != nil {
		return fmt.Errorf("jsoncloud: write %s: %w", c.path, err)
	}
	return nil
}
