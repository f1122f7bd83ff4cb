package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/agentclient"
)

// resolveAgentArg turns enqueue's --agent into an agent id: an id ("agent-<uuid4>") as it is, a
// name through Letta's agent list (GET /v1/agents/?name=), which must find exactly one agent.
// With --dev the Letta server is the dev worker's simulator, whose URL the dev worker keeps in
// its in-memory Redis; otherwise LETTA_BASE_URL and LETTA_API_KEY, as the worker's.
// badName reports an answer that names no agent or several (bad input, not trouble).
func resolveAgentArg(ctx context.Context, o enqueueOpts, rdb redis.UniversalClient) (id string, badName bool, err error) {
	if agentclient.IsAgentID(o.agent) {
		return o.agent, false, nil
	}
	base, key := o.lettaURL, o.lettaKey
	if o.dev {
		u, err := rdb.Get(ctx, DevLettaURLKey).Result()
		if err != nil {
			return "", false, fmt.Errorf("--agent %q is a name, and the dev worker's Letta simulator could not be found to resolve it (is `worker --dev` running?): %v", o.agent, err)
		}
		base, key = u, ""
	}
	if err := checkLettaBaseURL(base); err != nil {
		return "", true, fmt.Errorf("--agent %q is a name, to be resolved at LETTA_BASE_URL=%q (flag --letta-base-url): %v", o.agent, redactURL(base), err)
	}
	c, err := agentclient.New(agentclient.Config{BaseURL: base, APIKey: key, RequestTimeout: 15 * time.Second})
	if err != nil {
		return "", true, fmt.Errorf("--agent %q is a name, to be resolved at LETTA_BASE_URL: %v", o.agent, err)
	}
	id, err = c.ResolveAgent(ctx, o.agent)
	if err != nil {
		if errors.Is(err, agentclient.ErrAgentName) {
			return "", true, errors.New(strings.TrimPrefix(err.Error(), "agentclient: "))
		}
		return "", false, fmt.Errorf("--agent %q is a name and Letta could not be asked for it: %v", o.agent, err)
	}
	return id, false, nil
}
