package agentclient_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/integration/lettasim"
)

func TestResolveAgent(t *testing.T) {
	sim := lettasim.NewServer(lettasim.Config{})
	defer sim.Close()
	demo := sim.CreateAgent("demo", nil)
	sim.CreateAgent("twin", nil)
	sim.CreateAgent("twin", nil)
	c, err := agentclient.New(agentclient.Config{BaseURL: sim.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if got, err := c.ResolveAgent(ctx, "demo"); err != nil || got != demo {
		t.Fatalf("by name: %q %v", got, err)
	}
	if got, err := c.ResolveAgent(ctx, demo); err != nil || got != demo {
		t.Fatalf("by id: %q %v", got, err)
	}
	// An id is not looked up: a well-formed unknown id passes through (the send will 404).
	unknown := "agent-00000000-0000-4000-8000-000000000000"
	if got, err := c.ResolveAgent(ctx, unknown); err != nil || got != unknown {
		t.Fatalf("unknown id: %q %v", got, err)
	}
	for _, name := range []string{"nobody", "twin", "agent-demo"} {
		_, err := c.ResolveAgent(ctx, name)
		if !errors.Is(err, agentclient.ErrAgentName) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
	all, err := c.ListAgents(ctx, "")
	if err != nil || len(all) != 3 {
		t.Fatalf("list all: %v %v", all, err)
	}
	if agentclient.IsAgentID("agent-demo") || !agentclient.IsAgentID(demo) {
		t.Fatal("IsAgentID")
	}
}
