package app

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/lettaq/lettaq/integration/lettasim"
)

// Names of dev mode's demo agents. Their ids are minted at start ("agent-<uuid4>", as Letta's);
// GET /v1/agents/?name= finds them, and enqueue --agent takes a name. Any other agent id is
// answered 404, as Letta answers it (POST /v1/agents/ creates one, with the quick script).
const (
	DemoAgent      = "demo"       // answers at once, token by token
	DemoAgentTools = "demo-tools" // looks something up with a tool first
	DemoAgentSlow  = "demo-slow"  // thinks for 20s: longer than dev mode's 8s stream clock
	// DemoAgentApproval asks approval to run send_email, then answers once the call is approved
	// (or says it did not send it, when denied).
	DemoAgentApproval = "demo-approval"
)

// DemoAgentNames lists the demo agents, in the order dev mode presents them.
var DemoAgentNames = []string{DemoAgent, DemoAgentTools, DemoAgentSlow, DemoAgentApproval}

// DevLettaURLKey is the key of the dev worker's in-memory Redis that holds the simulator's base
// URL, so that enqueue --dev can resolve agent names even when the simulator had to take
// another port than LETTAQ_DEV_LETTA_ADDR.
const DevLettaURLKey = "lettaq:dev:letta-url"

// DevTokenDelay is how long a demo agent takes per streamed token (a chunk of a few words), so
// the live view shows the answer growing at a human pace.
const DevTokenDelay = 30 * time.Millisecond

// DevDeltaMaxAge is how long a dev worker holds answer text before an answer_delta event
// (queue.WorkerConfig.Timing.DeltaMaxAge; the default, a second, would send a demo answer, which
// streams in under a second, as one delta, and nobody would see it grow).
const DevDeltaMaxAge = 100 * time.Millisecond

// DevPingInterval is how often the simulator pings a quiet stream in dev mode.
const DevPingInterval = time.Second

// DemoScripts are the scripts of the demo agents.
func DemoScripts() map[string]lettasim.Script {
	quick := lettasim.Script{Tokens: true, Steps: []lettasim.Step{
		{Kind: lettasim.Reasoning, Text: "The user wrote to me. I will answer.", Delay: 500 * time.Millisecond},
		{Kind: lettasim.Assistant, Delay: 300 * time.Millisecond},
	}}
	tools := lettasim.ToolScript(3*time.Second, "I looked it up: lettaq runs every message exactly once.", "web_search")
	tools.Tokens = true
	slow := lettasim.ThinkingScript(20*time.Second, "That took a while: the stream clock fired after 8s, and the worker continued the same run instead of sending your message again.")
	slow.Tokens = true
	// The run ends at the approval request; the steps after it are what the run of an approving
	// answer does (a denial makes the simulator's model answer that it did not send it).
	approval := lettasim.Script{Tokens: true, Steps: []lettasim.Step{
		{Kind: lettasim.Reasoning, Text: "I should email the team about this. That needs the user's approval.", Delay: 500 * time.Millisecond},
		{Kind: lettasim.ApprovalRequest, ToolName: "send_email",
			Arguments: `{"to": "team@example.com", "subject": "A note from the demo agent"}`},
		{Kind: lettasim.Reasoning, Text: "The email went out.", Delay: 500 * time.Millisecond},
		{Kind: lettasim.Assistant, Text: "Done: I emailed the team at team@example.com."},
	}}
	quick.TokenDelay, tools.TokenDelay, slow.TokenDelay, approval.TokenDelay = DevTokenDelay, DevTokenDelay, DevTokenDelay, DevTokenDelay
	return map[string]lettasim.Script{DemoAgent: quick, DemoAgentTools: tools, DemoAgentSlow: slow, DemoAgentApproval: approval}
}

// DevEnv is dev mode's embedded infrastructure: an in-memory Redis and a Letta simulator.
type DevEnv struct {
	Redis     *miniredis.Miniredis
	RedisAddr string
	Sim       *lettasim.Sim
	LettaURL  string
	// Agents maps the demo agents' names to their ids.
	Agents map[string]string
	srv    *http.Server
}

// StartDev starts miniredis on redisAddr (which must be free: enqueue --dev connects there)
// and the simulator on lettaAddr, or on another free loopback port when that one is taken.
func StartDev(redisAddr, lettaAddr string) (*DevEnv, error) {
	if !IsLoopback(redisAddr) {
		return nil, fmt.Errorf("LETTAQ_DEV_REDIS_ADDR=%q: dev mode listens on loopback only", redisAddr)
	}
	if !IsLoopback(lettaAddr) {
		return nil, fmt.Errorf("LETTAQ_DEV_LETTA_ADDR=%q: dev mode listens on loopback only", lettaAddr)
	}
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr(redisAddr); err != nil {
		return nil, fmt.Errorf("LETTAQ_DEV_REDIS_ADDR=%q: cannot listen (is another dev worker running?): %v", redisAddr, err)
	}
	sim := lettasim.New(lettasim.Config{PingInterval: DevPingInterval, DefaultScript: DemoScripts()[DemoAgent]})
	agents := map[string]string{}
	for _, name := range DemoAgentNames {
		sc := DemoScripts()[name]
		agents[name] = sim.CreateAgent(name, &sc)
	}
	ln, err := net.Listen("tcp", lettaAddr)
	if err != nil {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			mr.Close()
			return nil, fmt.Errorf("dev mode: cannot listen for the Letta simulator: %v", err)
		}
	}
	srv := &http.Server{Handler: sim, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err
		}
	}()
	d := &DevEnv{Redis: mr, RedisAddr: mr.Addr(), Sim: sim, LettaURL: "http://" + ln.Addr().String(), Agents: agents, srv: srv}
	if err := mr.Set(DevLettaURLKey, d.LettaURL); err != nil {
		d.Close()
		return nil, fmt.Errorf("dev mode: %v", err)
	}
	return d, nil
}

// Close stops the simulator (ending its runs) and the in-memory Redis.
func (d *DevEnv) Close() {
	d.Sim.Close()
	_ = d.srv.Close()
	d.Redis.Close()
}
