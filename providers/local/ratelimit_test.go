package local

import "testing"

// TestAgentLimiterGrowsWithAgents: the agents' client rate is perAgentQPS per agent, never below
// the minimum, and shrinks again as agents go.
func TestAgentLimiterGrowsWithAgents(t *testing.T) {
	l := newAgentLimiter()
	for _, tc := range []struct {
		add  int
		want float32
	}{
		{1, minClientQPS},
		{999, minClientQPS},
		{4000, 2500},
		{-4000, minClientQPS},
		{-5000, minClientQPS}, // never negative
		{3000, 1500},
	} {
		l.add(tc.add)
		if got := l.QPS(); got != tc.want {
			t.Fatalf("after adding %d agents (%d in all): %v QPS, want %v", tc.add, l.agents, got, tc.want)
		}
		if burst := l.l.Burst(); float32(burst) < 2*tc.want {
			t.Fatalf("burst %d below twice the rate %v", burst, tc.want)
		}
	}
	if !l.TryAccept() {
		t.Fatal("a fresh limiter refuses a request")
	}
}
