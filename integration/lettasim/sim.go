package lettasim

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// Config configures a Sim. The zero value is usable.
type Config struct {
	// PingInterval is the time without data after which a stream gets a ping; default 20s like
	// Letta. It is not multiplied by TimeScale.
	PingInterval time.Duration
	// TimeScale multiplies every scripted delay and fault duration; 0 means 1. Tests use e.g.
	// 0.001 so that a "3 minute" turn runs in 180ms.
	TimeScale float64
	// APIKey, if non-empty, is required as "Authorization: Bearer <key>" (401 otherwise) on every
	// endpoint but /v1/health/.
	APIKey string
	// DefaultScript is used for agents created without a script; default: one reasoning step and
	// one assistant message answering "you said: <text>".
	DefaultScript Script
	// Logf, if set, receives a line for each request that hits a fault and each run that ends.
	Logf func(format string, args ...any)

	// ResumeMaxAge: resuming a run created longer ago answers 410; default 3h (not scaled).
	ResumeMaxAge time.Duration
	// PingOnlyLimit: a stream that has sent only pings for this long is ended without [DONE],
	// as Letta does after 1800s (the default; not scaled). Negative disables it.
	PingOnlyLimit time.Duration
	// DescPagesOldestFirst emulates a quirk WIRE.md warns about: a list with order=desc picks the
	// newest rows but returns them oldest-first.
	DescPagesOldestFirst bool
	// AutoCreateAgents creates an agent (with the default script) the first time an unknown but
	// well-formed agent id (agent-<uuid4>) is used, instead of answering 404 as Letta does. For
	// load tests whose processes agree on ids without talking (integration/bench); dev mode
	// leaves it off, so a mistyped id fails there as it would in production.
	AutoCreateAgents bool
	// OneRunPerAgent answers a send to an agent that has a run in progress with 409
	// {"detail": {"message": "CONVERSATION_BUSY: ...", "run_id": <the running run>}} and stores
	// nothing, as a Letta server does for a busy conversation. Off by default: runs of one
	// agent may overlap.
	OneRunPerAgent bool

	// The conversation endpoints (see conversations.go). Durations here are scaled by TimeScale.

	// LockTTL is how long a run holds its conversation's lock at most (the lock is never
	// extended: a longer run stops blocking sends); default 300s like Letta.
	LockTTL time.Duration
	// OtidMapTTL is how long a background send's otids map to its run; default 3h.
	OtidMapTTL time.Duration
	// SecondChance is how long a background send that loses the race to a lock holder sent with
	// the same otid waits for its otids to be mapped (then it replays the holder's run) or the
	// lock to free, before it answers 409; default 1.75s. Negative: none.
	SecondChance time.Duration
	// RegisterLag delays the mapping of a background send's otids after its run took the lock
	// (default 0: at once). It opens the window in which a same-otid resend loses the race to
	// the lock holder, so tests can show the second chance.
	RegisterLag time.Duration
	// MaxStreamChunks is how many chunks of a background run's stream are kept; older ones are
	// trimmed (approximately: trimming starts 25% above it), so a resume from 0 of a very long
	// run starts at the oldest chunk kept. Default 10,000 like Letta; negative: no limit.
	MaxStreamChunks int
	// HostedBusy answers a busy conversation in the form Letta's hosted service has been seen
	// using, {"error": "Conversation … is busy with another active run."} (no run_id), instead
	// of the server's {"detail": "CONFLICT: …", "run_id": …}. A send's [[sim busy_form=hosted]]
	// or busy_form=detail picks the form of the 409 that send gets.
	HostedBusy bool
	// ImageFetch decides whether the server can fetch an image URL of a user message (nil: any
	// http(s) URL with a host, except hosts under the reserved .invalid domain). An error is a
	// 400 "Failed to fetch image from <url>: <error>", as Letta's LettaImageFetchError, and
	// nothing is stored. The Sim never touches the network.
	ImageFetch func(url string) error
}

// Sim is a Letta-compatible server in a box: an http.Handler with agents, scripted turns,
// faults and assertions. Start it on loopback with NewServer, or mount it with New.
type Sim struct {
	cfg     Config
	scale   float64
	mux     *http.ServeMux
	closing chan struct{}

	mu         sync.RWMutex
	closed     bool
	agents     map[string]*agent
	agentOrder []*agent
	runs       map[string]*run
	runOrder   []*run
	globalList ListFault
	convs      map[string]*thread
	convOrder  []*thread

	lockTTL, otidTTL, secondChance, registerLag time.Duration
	maxChunks                                   int

	otidMu  sync.Mutex
	otids   map[string][]Received
	userSig chan struct{} // closed and replaced whenever a user message is stored
	pendSig chan struct{} // closed and replaced whenever a thread starts waiting on an approval

	wg    sync.WaitGroup // run goroutines
	stats stats
}

type agent struct {
	id      string
	name    string
	created time.Time

	mu        sync.RWMutex
	script    *Script
	history   []*row
	index     map[string]*row // live rows; seeded ones are found through seeds
	seeds     []*seedBatch
	received  []Received
	approvals []Received // approval messages
	runs      []*run
	fault     *faultSlot
	list      ListFault
	attempts  map[string]int // otid -> send attempts seen (directive faults apply to the first few)
	sendMu    sync.Mutex     // with OneRunPerAgent: the busy check and the run's start are one step
	def       *thread        // the default thread: its lock and otid map (its rows are history)
}

// activeRun returns the id of a run of a that has not ended, or "".
func (a *agent) activeRun() string {
	a.mu.RLock()
	defer a.mu.RUnlock()
	for i := len(a.runs) - 1; i >= 0; i-- {
		select {
		case <-a.runs[i].done:
		default:
			return a.runs[i].id
		}
	}
	return ""
}

// lastRun returns the id of a's newest run, or "".
func (a *agent) lastRun() string {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if len(a.runs) == 0 {
		return ""
	}
	return a.runs[len(a.runs)-1].id
}

// Received is a user message (or an approval message) the Sim received and stored.
type Received struct {
	MessageID string
	Otid      string
	Text      string
	RunID     string
	SenderID  string
	At        time.Time
	// ConversationID is the thread it was sent to: "conv-…", "default" (the agent's default
	// thread through the conversation endpoints), or "" (the agent endpoints).
	ConversationID string
	// Images counts the image parts of a user message's content.
	Images int
	// Approvals holds an approval message's answers (nil for a user message).
	Approvals []ApprovalAnswer
}

// New returns a Sim. It starts no goroutine until a turn runs; call Close to end runs in flight.
func New(cfg Config) *Sim {
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = 20 * time.Second
	}
	if cfg.ResumeMaxAge <= 0 {
		cfg.ResumeMaxAge = 3 * time.Hour
	}
	if cfg.PingOnlyLimit == 0 {
		cfg.PingOnlyLimit = 1800 * time.Second
	}
	if len(cfg.DefaultScript.Steps) == 0 {
		stop := cfg.DefaultScript.StopReason
		tokens := cfg.DefaultScript.Tokens
		cfg.DefaultScript = defaultScript()
		cfg.DefaultScript.StopReason = stop
		cfg.DefaultScript.Tokens = tokens
	}
	if err := cfg.DefaultScript.validate(); err != nil {
		panic(err)
	}
	s := &Sim{
		cfg:     cfg,
		scale:   cfg.TimeScale,
		closing: make(chan struct{}),
		agents:  make(map[string]*agent),
		runs:    make(map[string]*run),
		otids:   make(map[string][]Received),
		userSig: make(chan struct{}),
		pendSig: make(chan struct{}),
		convs:   make(map[string]*thread),
	}
	if s.scale <= 0 {
		s.scale = 1
	}
	def := func(d, v time.Duration) time.Duration {
		if d == 0 {
			d = v
		}
		if d < 0 {
			return 0
		}
		return s.scaled(d)
	}
	s.lockTTL = def(cfg.LockTTL, 300*time.Second)
	s.otidTTL = def(cfg.OtidMapTTL, 3*time.Hour)
	s.secondChance = def(cfg.SecondChance, 1750*time.Millisecond)
	s.registerLag = def(cfg.RegisterLag, 0)
	s.maxChunks = cfg.MaxStreamChunks
	if s.maxChunks == 0 {
		s.maxChunks = 10000
	}
	s.routes()
	return s
}

// Close ends every run in flight (as cancelled) and every open stream, and waits for the runs'
// goroutines. Requests after Close answer 503. Close is idempotent.
func (s *Sim) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return
	}
	s.closed = true
	close(s.closing)
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *Sim) logf(format string, args ...any) {
	if s.cfg.Logf != nil {
		s.cfg.Logf(format, args...)
	}
}

func (s *Sim) scaled(d time.Duration) time.Duration { return scaleDuration(d, s.scale) }

// sleep waits d (already scaled; Forever waits until ctx ends), and reports false if ctx ended
// or the Sim closed first.
func (s *Sim) sleep(ctx context.Context, d time.Duration) bool {
	if d == 0 {
		return true
	}
	var timeout <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-timeout:
		return true
	case <-ctx.Done():
		return false
	case <-s.closing:
		return false
	}
}

// CreateAgent adds an agent with a fresh id ("agent-<uuid4>") and returns the id. A nil script
// means Config.DefaultScript.
func (s *Sim) CreateAgent(name string, script *Script) string {
	id := newID("agent")
	s.addAgent(id, name, script)
	return id
}

// AddAgent adds an agent with a fixed id, or replaces the script of an existing one. The id must
// have Letta's shape, "agent-<uuid4>" (AddAgent panics otherwise: the endpoints would answer 422
// for it).
func (s *Sim) AddAgent(id string, script *Script) {
	if !ValidAgentID(id) {
		panic(fmt.Sprintf("lettasim: AddAgent: %q is not an agent id (agent-<uuid4>)", id))
	}
	s.addAgent(id, id, script)
}

func (s *Sim) addAgent(id, name string, script *Script) *agent {
	if script != nil {
		if err := script.validate(); err != nil {
			panic(err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.agents[id]; ok {
		a.mu.Lock()
		a.script = cloneScript(script)
		a.mu.Unlock()
		return a
	}
	a := &agent{
		id: id, name: name, created: time.Now(),
		script:   cloneScript(script),
		index:    make(map[string]*row),
		attempts: make(map[string]int),
	}
	a.def = newThread(a, "", "")
	s.agents[id] = a
	s.agentOrder = append(s.agentOrder, a)
	return a
}

// SetScript replaces an agent's script (nil: the default script) for its next turns. Like the
// other setters (SetFault, ClearFault, SetListFault, SeedHistory) it panics on an unknown agent:
// that is a bug in the test.
func (s *Sim) SetScript(agentID string, script *Script) {
	if script != nil {
		if err := script.validate(); err != nil {
			panic(err)
		}
	}
	a := s.mustAgent(agentID)
	a.mu.Lock()
	a.script = cloneScript(script)
	a.mu.Unlock()
}

func (s *Sim) agent(id string) *agent {
	s.mu.RLock()
	a := s.agents[id]
	s.mu.RUnlock()
	if a == nil && s.cfg.AutoCreateAgents && id != "" {
		a = s.addAgent(id, id, nil)
	}
	return a
}

func (s *Sim) mustAgent(id string) *agent {
	s.mu.RLock()
	a := s.agents[id]
	s.mu.RUnlock()
	if a == nil {
		panic(fmt.Sprintf("lettasim: unknown agent %q", id))
	}
	return a
}

// SetFault arms f for the agent's next turn (or next f.Times turns, or every turn if
// f.Persistent), replacing any fault armed before. A "turn" is any send request (stream,
// messages, async) that passes validation. A fault set here wins over a directive's.
func (s *Sim) SetFault(agentID string, f Fault) {
	a := s.mustAgent(agentID)
	n := f.Times
	if n <= 0 {
		n = 1
	}
	if f.Persistent {
		n = -1
	}
	a.mu.Lock()
	a.fault = &faultSlot{f: f, remaining: n}
	a.mu.Unlock()
}

// ClearFault disarms the agent's fault.
func (s *Sim) ClearFault(agentID string) {
	a := s.mustAgent(agentID)
	a.mu.Lock()
	a.fault = nil
	a.mu.Unlock()
}

// SetListFault sets the read-endpoint fault of an agent (agentID "" sets it for every agent,
// in addition to the agent's own). The zero ListFault clears it.
func (s *Sim) SetListFault(agentID string, lf ListFault) {
	if agentID == "" {
		s.mu.Lock()
		s.globalList = lf
		s.mu.Unlock()
		return
	}
	a := s.mustAgent(agentID)
	a.mu.Lock()
	a.list = lf
	a.mu.Unlock()
}

// takeFault consumes one use of the agent's armed fault.
func (a *agent) takeFault() (Fault, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fault == nil {
		return Fault{}, false
	}
	f := a.fault.f
	if a.fault.remaining > 0 {
		a.fault.remaining--
		if a.fault.remaining == 0 {
			a.fault = nil
		}
	}
	return f, true
}

// SeedHistory puts n old messages (alternating user and assistant rows, each pair sharing a
// made-up run id, dated one second apart in the past) before the agent's existing history.
// It is cheap: seeded rows are virtual (their ids and texts are made when a page is encoded),
// so 100,000 messages take milliseconds.
func (s *Sim) SeedHistory(agentID string, n int) {
	a := s.mustAgent(agentID)
	if n <= 0 {
		return
	}
	b := newSeedBatch(n)
	ptrs := make([]*row, n, n+len(a.history))
	for i := range b.rows {
		r := &b.rows[i]
		r.seed, r.seedIdx, r.runPos = b, i, -1
		ptrs[i] = r
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.history = append(ptrs, a.history...)
	for i, r := range a.history {
		r.pos = i
	}
	a.seeds = append(a.seeds, b)
}

// lookup finds a stored row by message id (a.mu held).
func (a *agent) lookup(id string) *row {
	if r := a.index[id]; r != nil {
		return r
	}
	for _, b := range a.seeds {
		if r := b.find(id); r != nil {
			return r
		}
	}
	return nil
}

// UserMessages returns every user message the agent received and stored, oldest first, from
// every thread (Received.ConversationID tells which; ConversationUserMessages gives one).
func (s *Sim) UserMessages(agentID string) []Received {
	a := s.getAgent(agentID)
	if a == nil {
		return nil
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	return append([]Received(nil), a.received...)
}

// History returns the agent's stored messages, oldest first, one per LettaMessage.
func (s *Sim) History(agentID string) []Message {
	a := s.getAgent(agentID)
	if a == nil {
		return nil
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := make([]Message, 0, len(a.history))
	for _, r := range a.history {
		out = r.messages(out)
	}
	return out
}

func (s *Sim) getAgent(id string) *agent {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.agents[id]
}

// CountOtid returns how many stored user messages and approval messages (of any agent) carry
// otid. A correct client makes this exactly 1 per turn, whatever the faults.
func (s *Sim) CountOtid(otid string) int {
	s.otidMu.Lock()
	defer s.otidMu.Unlock()
	return len(s.otids[otid])
}

// WaitOtid waits until a user message (or approval message) with otid is stored, and returns
// the first one.
func (s *Sim) WaitOtid(ctx context.Context, otid string) (Received, error) {
	for {
		s.otidMu.Lock()
		got := s.otids[otid]
		sig := s.userSig
		s.otidMu.Unlock()
		if len(got) > 0 {
			return got[0], nil
		}
		select {
		case <-sig:
		case <-ctx.Done():
			return Received{}, ctx.Err()
		}
	}
}

// WaitOtids waits until user messages (or approval messages) with at least n distinct otids
// are stored: a test's signal that a load is a given share of the way through, to inject a
// fault there.
func (s *Sim) WaitOtids(ctx context.Context, n int) error {
	for {
		s.otidMu.Lock()
		got, sig := len(s.otids), s.userSig
		s.otidMu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-sig:
		case <-ctx.Done():
			return fmt.Errorf("lettasim: %d of %d otids stored: %w", got, n, ctx.Err())
		}
	}
}

// RunInfo describes a run.
type RunInfo struct {
	ID         string
	AgentID    string
	Otid       string // otid of the (first) user message that started it
	Status     string // created, running, completed, failed, cancelled
	StopReason string // empty while running
	Background bool
	Async      bool
	Created    time.Time
	Started    time.Time
	Ended      time.Time // zero while running
	TTFT       time.Duration
	Chunks     int // stream chunks logged so far (the seq_id of the last one, in background mode)
	// ConversationID: "conv-…", "default" (the default thread through the conversation
	// endpoints), or "" (the agent endpoints).
	ConversationID string
}

// Runs returns the agent's runs, oldest first.
func (s *Sim) Runs(agentID string) []RunInfo {
	a := s.getAgent(agentID)
	if a == nil {
		return nil
	}
	a.mu.RLock()
	runs := append([]*run(nil), a.runs...)
	a.mu.RUnlock()
	out := make([]RunInfo, len(runs))
	for i, r := range runs {
		out[i] = r.info()
	}
	return out
}

// Run returns one run.
func (s *Sim) Run(runID string) (RunInfo, bool) {
	r := s.getRun(runID)
	if r == nil {
		return RunInfo{}, false
	}
	return r.info(), true
}

func (s *Sim) getRun(id string) *run {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.runs[id]
}

// ErrUnknownRun is returned by WaitRunDone for a run id the Sim never made.
var ErrUnknownRun = errors.New("lettasim: unknown run")

// WaitRunDone waits until the run has ended (completed, failed or cancelled).
func (s *Sim) WaitRunDone(ctx context.Context, runID string) error {
	r := s.getRun(runID)
	if r == nil {
		return fmt.Errorf("%w %q", ErrUnknownRun, runID)
	}
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// WaitIdle waits until no run is in flight.
func (s *Sim) WaitIdle(ctx context.Context) error {
	for {
		s.mu.RLock()
		var pending *run
		for i := len(s.runOrder) - 1; i >= 0; i-- {
			r := s.runOrder[i]
			select {
			case <-r.done:
				continue
			default:
			}
			pending = r
			break
		}
		s.mu.RUnlock()
		if pending == nil {
			return nil
		}
		select {
		case <-pending.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Cancel cancels a run as the cancel endpoint does, and waits for it to end. It reports whether
// the run was in flight.
func (s *Sim) Cancel(ctx context.Context, runID string) bool {
	r := s.getRun(runID)
	if r == nil || !r.active() {
		return false
	}
	r.requestCancel()
	select {
	case <-r.done:
	case <-ctx.Done():
	}
	return true
}
