package continuation_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/continuation"
	"github.com/lettaq/lettaq/integration/lettasim"
)

// overrunBudget is a valid configuration whose follow once outran its window:
// resend never, background, resume; connect 1.5 s, stream total 2 s,
// continuation 2 s.
func overrunBudget(b *budget.Config) {
	b.ResendPolicy, b.Background, b.Resume = budget.ResendNever, true, true
	b.ConnectTimeout, b.StallTimeout, b.StreamTotal = 1500*time.Millisecond, time.Second, 2*time.Second
	b.ContinuationMax, b.RequestTimeout, b.AdmissionGrace = 2*time.Second, 200*time.Millisecond, 200*time.Millisecond
	b.DeliveryAllowance, b.SafetyMargin = 100*time.Millisecond, 100*time.Millisecond
	b.StopGrace = 100 * time.Millisecond
}

// phaseClock records when a turn entered each phase.
type phaseClock struct {
	mu sync.Mutex
	at map[continuation.Activity]time.Time
}

func (p *phaseClock) hooks() continuation.Hooks {
	p.at = map[continuation.Activity]time.Time{}
	return continuation.Hooks{OnActivity: func(ph continuation.Activity) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if _, ok := p.at[ph]; !ok {
			p.at[ph] = time.Now()
		}
	}}
}

func (p *phaseClock) get(ph continuation.Activity) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.at[ph]
}

// The follow draws every request and clock from its window's one deadline:
// a resume whose first byte comes late (1.4 s, under the connect clock)
// and then only pings ends with the window, not connect + a whole stream
// total later; and the attempt stays within the model's worst case.
// Before the window bounded it: follow 3.402s (ContinuationMax 2s); attempt 6.805s;
// simulated worst case 5.9s; TaskTimeout 6s.
func TestFollowResumeStaysInItsWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the overrun's figures in real time (about 6 s)")
	}
	sc := lettasim.ThinkingScript(10*time.Hour, "late") // thinks for 36 s of the simulator's clock
	e := newEnv(t, &sc, overrunBudget)
	const firstByte = 1400 * time.Millisecond
	e.proxied(t, func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/v1/runs/") && strings.HasSuffix(r.URL.Path, "/stream") {
			select { // the resume's first byte comes late
			case <-time.After(firstByte):
			case <-r.Context().Done():
				return
			}
		}
		next.ServeHTTP(w, r)
	})
	e.sim.SetFault(e.agent, lettasim.Fault{FirstByteDelay: 1300 * time.Second}) // 1.3 s, scaled by 0.001
	var pc phaseClock
	h := pc.hooks()
	st := agentclient.NewStreamState()
	tu := e.turn("think")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	d := runTurn(ctx, e.runner, tu, st, h)
	end := time.Now()
	attempt := end.Sub(start)
	follow := end.Sub(pc.get(continuation.ActivityContinuing))
	sim := e.b.WorstCase(nil)
	t.Logf("follow %v (ContinuationMax %v); attempt %v; simulated worst case %v; TaskTimeout %v; decision %v (%s)",
		follow.Round(time.Millisecond), e.b.ContinuationMax, attempt.Round(time.Millisecond), sim, e.b.TaskTimeout(), d.Outcome, d.Reason)
	const slack = 150 * time.Millisecond // scheduling, on a busy machine
	if follow > e.b.ContinuationMax+slack {
		t.Errorf("follow took %v, past its window ContinuationMax %v", follow, e.b.ContinuationMax)
	}
	if attempt > sim+slack {
		t.Errorf("attempt took %v, past the simulated worst case %v", attempt, sim)
	}
	if d.Outcome != continuation.StillRunning || d.Resumes != 1 {
		t.Errorf("decision %v resumes %d (%s): want still_running after one resume", d.Outcome, d.Resumes, d.Reason)
	}
}
