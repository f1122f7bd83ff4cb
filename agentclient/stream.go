package agentclient

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// SendRequest is one user message to send to an agent.
type SendRequest struct {
	AgentID string
	Text    string
	// Otid is the turn's idempotency key: a retry of the same turn must
	// reuse it. Required.
	Otid     string
	SenderID string
	// StreamTokens asks for token deltas (honoured by some providers only).
	StreamTokens bool
	// Background makes the run resumable with ResumeStream.
	Background bool
	// MaxSteps caps the agent's steps; 0 leaves Letta's default (50).
	MaxSteps int
	// ConversationID, when set, sends to that conversation of the agent
	// ("default" or conv-<uuid4>, see conversations.go) instead of the
	// agent's deprecated, unlocked endpoint.
	ConversationID string
	// NoPings asks the server not to send keep-alive pings (on by default:
	// the stall clock relies on them).
	NoPings bool
	// Images are sent as content parts next to Text (see input.go).
	Images []Image
	// Approvals, when set, make the request Letta's approval message (it
	// answers every pending call of the step) instead of a user message;
	// Text and Images are then empty.
	Approvals []ApprovalAnswer
}

func (r *SendRequest) validate() error {
	switch {
	case r.AgentID == "":
		return errors.New("agentclient: SendRequest.AgentID is empty")
	case r.Otid == "":
		return errors.New("agentclient: SendRequest.Otid is empty: every turn needs its idempotency key")
	}
	return r.validateInput()
}

type messageCreate struct {
	Type     string `json:"type"`
	Role     string `json:"role"`
	Content  any    `json:"content"` // a string, or []contentPart
	Otid     string `json:"otid"`
	SenderID string `json:"sender_id,omitempty"`
}

type sendBody struct {
	Messages     []any `json:"messages"`
	StreamTokens bool  `json:"stream_tokens"`
	IncludePings bool  `json:"include_pings"`
	Background   bool  `json:"background"`
	MaxSteps     int   `json:"max_steps,omitempty"`
}

func (r SendRequest) body() sendBody {
	return sendBody{
		Messages:     r.messages(),
		StreamTokens: r.StreamTokens, IncludePings: !r.NoPings, Background: r.Background, MaxSteps: r.MaxSteps,
	}
}

// Event is one event of a stream, handed to StreamOptions.OnEvent after the
// StreamState has been updated with it.
type Event struct {
	// Message is the decoded message; nil for [DONE] and for frames whose
	// data was not JSON (then DecodeErr says why). It is the receiver's to
	// keep: the decoder reuses its scratch, never a Message it handed on.
	// Pings, which come every few seconds for as long as the agent thinks,
	// cost nothing: a *Ping carries no ID or Date (a keep-alive's own name
	// nothing), and a ping that repeats the stream's last one (the same run
	// id and seq id) is that same *Ping again. Do not modify it.
	Message Message
	// Update says what the message changed in the transcript.
	Update Update
	// SSEEvent is the frame's `event:` name: "" for data, "error",
	// "cancelled".
	SSEEvent string
	// Done is true for `data: [DONE]`.
	Done      bool
	DecodeErr error
}

// StreamOptions are per-call hooks and overrides.
type StreamOptions struct {
	// Clocks override the client's clocks field by field (zero keeps).
	Clocks Clocks
	// OnEvent is called for every event, in order, from the reading
	// goroutine, after the state was updated.
	OnEvent func(Event)
	// OnIdle is called when only pings have arrived for ContentIdle (and
	// again after each further ContentIdle): the agent is still thinking.
	// It runs on a timer goroutine and must not block.
	OnIdle func(idle time.Duration)
	// Stepwise: when the stream has no bytes to read yet, the call
	// returns nil at once, with the stream left open in the StreamState
	// (StreamState.Pending reports it), instead of waiting under the call.
	// Its clocks and the caller's context still end it. The caller waits
	// where it likes with StreamState.Wait and goes on with
	// Client.ReadPending, until Pending is false: the call's result is
	// ReadPending's last. Only a dedicated plain-TCP stream on unix
	// returns early; others wait under the call as usual.
	Stepwise bool
}

func (c *Client) clocksFor(o StreamOptions) Clocks {
	k := c.clocks
	if o.Clocks.Connect > 0 {
		k.Connect = o.Clocks.Connect
	}
	if o.Clocks.Stall > 0 {
		k.Stall = o.Clocks.Stall
	}
	if o.Clocks.Total > 0 {
		k.Total = o.Clocks.Total
	}
	if o.Clocks.ContentIdle != 0 {
		k.ContentIdle = o.Clocks.ContentIdle
	}
	if o.Clocks.StopGrace > 0 {
		k.StopGrace = o.Clocks.StopGrace
	}
	return k
}

// SendStream sends one user message and reads the turn's stream to its end,
// updating st as it goes. It returns nil when the run stopped (st has the
// stop reason, which may be a failure such as llm_api_error), an *Error when
// the server refused the request, or a *StreamError when a clock fired, the
// caller cancelled, or the stream was cut before its stop_reason — then the
// run may still be going on: continue it, do not send again.
func (c *Client) SendStream(ctx context.Context, req SendRequest, st *StreamState, opt StreamOptions) error {
	path, body, err := req.target()
	if err != nil {
		return err
	}
	st.expectSeqAfter(0, false)
	return c.stream(ctx, "send message", path, body, st, &opt)
}

// target is where the request goes and what it sends. With a
// ConversationID: POST /v1/conversations/{id}/messages with streaming on.
// The conversation takes one run at a time: a send while another run holds
// it is a busy 409 (IsBusy). With Background set, a send whose otid the
// server has seen (for 3 h) answers with that run's stream, replayed from
// the start, instead of starting another run.
func (r *SendRequest) target() (path string, body any, err error) {
	if err := r.validate(); err != nil {
		return "", nil, err
	}
	if r.ConversationID != "" {
		if err := checkConversationID("SendRequest.ConversationID", r.ConversationID); err != nil {
			return "", nil, err
		}
		return "/v1/conversations/" + r.ConversationID + "/messages", r.conversationBody(), nil
	}
	id, err := pathID("send message", "agent_id", r.AgentID)
	if err != nil {
		return "", nil, err
	}
	return "/v1/agents/" + id + "/messages/stream", r.body(), nil
}

// ResumeRequest resumes the stream of a background run.
type ResumeRequest struct {
	RunID string
	// StartingAfter is the last seq_id already seen (0: from the start).
	StartingAfter int64
}

type resumeBody struct {
	StartingAfter int64   `json:"starting_after"`
	IncludePings  bool    `json:"include_pings"`
	PollInterval  float64 `json:"poll_interval"`
	BatchSize     int     `json:"batch_size"`
}

// ResumeStream re-attaches to a background run's stream after the given
// seq_id, with the same parser, state and clocks as SendStream. Letta answers
// 400 when the run was not started in background mode, 410 when it is too old
// and 503 when the server has no Redis: fall back to polling then.
func (c *Client) ResumeStream(ctx context.Context, req ResumeRequest, st *StreamState, opt StreamOptions) error {
	if req.RunID == "" {
		return errors.New("agentclient: ResumeRequest.RunID is empty")
	}
	id, err := pathID("resume stream", "run_id", req.RunID)
	if err != nil {
		return err
	}
	st.SetRunID(req.RunID)
	path := "/v1/runs/" + id + "/stream"
	body := resumeBody{StartingAfter: req.StartingAfter, IncludePings: true, PollInterval: 0.1, BatchSize: 100}
	st.expectSeqAfter(req.StartingAfter, true)
	return c.stream(ctx, "resume stream", path, body, st, &opt)
}

// clockFired is the cause a watchdog clock leaves.
type clockFired struct{ clock Clock }

func (c clockFired) Error() string { return string(c.clock) + " timeout" }

// errStopGrace: the body stayed open StopGrace after stop_reason.
var errStopGrace = errors.New("stream body not closed after stop_reason")

// stream sends one streaming request and reads its stream. The goroutine
// spends the turn blocked under this call, so what it holds while it waits
// is what a thinking turn costs: everything that is only needed to open
// the stream (the request, its context, the response head, their buffers)
// is let go by open, and the frames on the read path are kept small.
func (c *Client) stream(ctx context.Context, op, path string, body any, st *StreamState, opt *StreamOptions) error {
	s, err := c.open(ctx, op, path, body, st, opt)
	if s == nil {
		return err
	}
	if opt.Stepwise {
		if rs, ok := s.rd.src.(*rawSource); ok {
			rs.step, rs.onEvent = true, opt.OnEvent
		}
	}
	return s.read(ctx, st, opt.OnEvent)
}

// read reads the stream to its end, or, stepwise, until it has no bytes
// to read yet (then st holds it, and read returns nil). ctx is the
// caller's context the stream was opened with.
func (s *openStream) read(ctx context.Context, st *StreamState, onEvent func(Event)) error {
	defer s.closeUnlessPending(st)
	result, readErr := readEvents(&s.rd, st, onEvent, s.wd.stopReasonAt)
	if readErr == errPending {
		st.pending = s
		return nil
	}
	if result == nil && readErr == nil && s.reuse {
		s.keepConn()
	}
	return s.end(ctx, st, result, readErr)
}

// closeUnlessPending closes the stream once it is read, and not while it
// waits in st.
func (s *openStream) closeUnlessPending(st *StreamState) {
	if st.pending != s {
		s.close()
	}
}

// ReadPending goes on reading the stream pending in st (see
// StreamOptions.Stepwise), with ctx the context the stream was sent with.
// It returns what SendStream or ResumeStream would have; st.Pending is
// true again when the stream has no more bytes yet. Without a pending
// stream it returns an error and does nothing.
func (c *Client) ReadPending(ctx context.Context, st *StreamState) error {
	s := st.pending
	if s == nil {
		return errors.New("agentclient: ReadPending: no stream is pending in this state")
	}
	st.pending = nil
	return s.read(ctx, st, s.rd.src.(*rawSource).onEvent)
}

// Wait waits until the stream pending in st has bytes to read, or has
// ended (a clock fired, or the caller's context ended): call ReadPending
// next. It returns at once when no stream is pending, or when an earlier
// Wait already waited (ReadPending has not read it yet).
func (st *StreamState) Wait() {
	if s := st.pending; s != nil {
		s.rd.src.(*rawSource).wait(&s.rd)
	}
}

// Pending reports whether a stepwise stream waits in st for the agent's
// next bytes (see StreamOptions.Stepwise).
func (st *StreamState) Pending() bool { return st.pending != nil }

// openStream is one stream from its request on: what a read holds, in one
// allocation.
type openStream struct {
	c        *Client
	op, path string // for errors: the call and the request's path (method POST)
	wd       watchdog
	rd       sseReader
	cancel   context.CancelFunc // the request's context
	conn     net.Conn           // a dedicated stream's connection
	body     io.ReadCloser      // a net/http stream's body
	unhook   func() bool        // stops the hook that closes conn when the caller's context ends
	reuse    bool               // conn may carry another request once the body has ended (reusable)
}

// open sends the request and reads the response head. It returns the
// stream ready to read, or nil and the error: a clock, the caller's
// context, a transport failure, an answer other than 2xx, a body that is
// not a stream.
func (c *Client) open(ctx context.Context, op, path string, body any, st *StreamState, opt *StreamOptions) (*openStream, error) {
	if err := ctx.Err(); err != nil {
		return nil, &StreamError{Clock: ClockCanceled, State: st.Snapshot(), Err: err}
	}
	s := &openStream{c: c, op: op, path: c.base.Path + path}
	start := time.Now()
	st.begin(start)
	rctx, cancel := context.WithCancel(ctx)
	s.cancel = cancel
	s.wd.begin(st, c.clocksFor(*opt), cancel, opt.OnIdle, start)
	req, err := c.newRequest(rctx, http.MethodPost, path, nil, body)
	if err != nil {
		s.close()
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Cache-Control", "no-cache")
	req.Header.Set("Accept-Encoding", "identity") // both transports: an event stream is read as it comes (checkEventStream)
	var resp *http.Response
	if c.sc == nil {
		if resp, err = c.hc.Do(req); err == nil {
			s.body = resp.Body
			err = s.head(resp)
			s.rd.init(readerSource{resp.Body}, bodyDecoder{}, c.cfg.MaxLineBytes, c.cfg.MaxEventBytes, s.wd.onBytes)
		}
	} else {
		var ex exchange
		if ex, err = c.sc.roundTrip(req); err == nil {
			s.conn = ex.conn
			err = s.head(ex.resp) // an error answer's body is read under the request's context (a clock cuts it)
			if !ex.unhook() && err == nil {
				err = errWatchdog // a clock or the caller ended the request: the connection is closing
			}
			if err == nil {
				err = s.reading(ctx, ex.conn, ex.resp, ex.br)
			}
			ex.br.Reset(nil)
			headReaders.Put(ex.br)
		}
	}
	if err != nil {
		var ae *Error
		var pe *ProtocolError
		if !errors.As(err, &ae) && !errors.As(err, &pe) { // not the server's answer refused by head
			err = s.failed(ctx, st, err)
		}
		s.close()
		return nil, err
	}
	st.limit(c.cfg.MaxTranscriptBytes)
	return s, nil
}

// head checks the response head: a 2xx event stream.
func (s *openStream) head(resp *http.Response) error {
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return s.c.apiError(s.op, http.MethodPost, s.path, resp)
	}
	if err := checkEventStream(resp); err != nil {
		return s.c.protocolError(s.op, http.MethodPost, s.path, err)
	}
	return nil
}

// reading readies a dedicated stream's read: the body bytes that came with
// the head go to the reader, the request's context is let go (from now on
// a clock, or the end of the caller's context, closes the connection), and
// nothing of the request or the response head is kept.
func (s *openStream) reading(parent context.Context, conn net.Conn, resp *http.Response, br *bufio.Reader) error {
	var src byteSource = readerSource{conn}
	if rs := newRawSource(conn); rs != nil {
		src = rs
	}
	s.rd.init(src, bodyFramingOf(resp), s.c.cfg.MaxLineBytes, s.c.cfg.MaxEventBytes, s.wd.onBytes)
	b, _ := br.Peek(br.Buffered())
	if err := s.rd.prime(b); err != nil {
		return err
	}
	if !s.wd.reading(conn) {
		return errWatchdog // a clock fired first
	}
	s.reuse = s.c.sc.idle != nil && reusable(resp)
	s.cancel()
	s.cancel = nil
	s.unhook = context.AfterFunc(parent, s.wd.parentDone)
	return nil
}

// keepConn hands a dedicated stream's connection, its stream ended with
// no error, to the pool (release decides whether it is fit to keep). It
// does so only if it can take the connection back from the watchdog and
// the caller's context hook first: a clock that fired, or the end of the
// caller's context, has closed it or is closing it, and such a connection
// is never offered to another stream.
//
// Not inlined: see handleFrame.
//
//go:noinline
func (s *openStream) keepConn() {
	if !s.wd.release() {
		return
	}
	if s.unhook != nil {
		s.unhook() // parentDone, if it runs now, finds the watchdog stopped
		s.unhook = nil
	}
	conn := s.conn
	s.conn = nil
	s.c.sc.release(conn, &s.rd)
}

// errWatchdog stands for the read error of a stream the watchdog ended
// before its read began (failed reports the clock).
var errWatchdog = errors.New("stream ended by its watchdog")

// close lets go of everything the stream holds.
//
// Not inlined: see handleFrame.
//
//go:noinline
func (s *openStream) close() {
	if s.unhook != nil {
		s.unhook()
	}
	s.wd.stop()
	if s.conn != nil {
		_ = s.conn.Close()
	}
	if s.body != nil {
		_ = s.body.Close()
	}
	if s.cancel != nil {
		s.cancel()
	}
	s.rd.close()
}

// end turns what the read found into the stream's result.
//
// Not inlined: see handleFrame.
//
//go:noinline
func (s *openStream) end(parent context.Context, st *StreamState, result, readErr error) error {
	if pe := (*ProtocolError)(nil); errors.As(result, &pe) || errors.As(readErr, &pe) {
		return s.c.protocolError(s.op, http.MethodPost, s.path, pe)
	}
	if readErr != nil {
		return s.failed(parent, st, readErr)
	}
	return result
}

// readEvents is the read path of every stream: frame, decode, update the
// state, hand the event on. It returns the stream's outcome, or readErr when
// reading failed (the caller decides which clock or cause that was). It
// blocks in rd.Next for as long as the agent thinks, so its frame is kept
// small: each frame is handled by handleFrame.
func readEvents(rd *sseReader, st *StreamState, onEvent func(Event), onStop func(time.Time)) (result, readErr error) {
	for {
		fr, err := rd.Next()
		if err != nil {
			return readEnd(st, err)
		}
		if done, result := handleFrame(fr, &rd.ping, st, onEvent, onStop); done {
			return result, nil
		}
	}
}

// readEnd is the end of a read: EOF, a limit passed, or a read error.
func readEnd(st *StreamState, err error) (result, readErr error) {
	if errors.Is(err, io.EOF) {
		return eof(st), nil
	}
	var pe *ProtocolError
	if errors.As(err, &pe) {
		return pe, nil
	}
	return nil, err
}

// handleFrame decodes one frame, updates the state and hands the event on.
// done says the stream is over, with its result. ping is the stream's last
// ping (see decodeStreamMessage).
//
// The rare paths (end of stream, error and cancel frames, and the stream's
// close and end) are functions of their own, not inlined, so that the
// frames every ping is read through stay small: a thinking turn's
// goroutine reads each ping a few frames under its handler, and a stack
// that grows past 4 KiB there stays 8 KiB until the next GC. The figure:
// integration/bench's "stacks per in-flight turn later in the think" is
// 6.9 KB with them not inlined, 11.7–12.4 KB inlined (3,000 turns,
// conversation mode).
func handleFrame(fr sseFrame, ping **Ping, st *StreamState, onEvent func(Event), onStop func(time.Time)) (done bool, result error) {
	if fr.Event == "" || fr.Event == "message" {
		if bytes.Equal(bytes.TrimSpace(fr.Data), []byte("[DONE]")) {
			return true, frameDone(fr.Event, st, onEvent)
		}
	}
	m, derr := decodeStreamMessage(fr.Data, *ping)
	if p, ok := m.(*Ping); ok && fr.Event != "error" {
		*ping = p
	}
	if derr != nil {
		if onEvent != nil {
			onEvent(Event{SSEEvent: fr.Event, DecodeErr: derr})
		}
		return false, nil
	}
	if fr.Event == "error" {
		m = errorFrame(m, fr.Data)
	}
	if replayed, g := st.seqGap(m); g != nil {
		return true, seqGapEnd(g, st)
	} else if replayed {
		return false, nil // applied already (the server replayed from an earlier chunk)
	}
	now := time.Now()
	// Stream chunks append: token deltas join, and in step mode each
	// id and type arrives once, so appending to nothing sets it.
	u := st.Apply(m, false, now)
	if pe := st.LimitErr(); pe != nil {
		return true, pe
	}
	if _, ok := m.(*StopReason); ok && onStop != nil {
		onStop(now)
	}
	if onEvent != nil {
		onEvent(Event{Message: m, Update: u, SSEEvent: fr.Event})
	}
	if fr.Event == "error" || fr.Event == "cancelled" {
		return true, frameEnd(fr.Event, m, st, now)
	}
	return false, nil
}

// seqGapEnd is the result of a resumed stream that skipped chunks: cut,
// with the gap as its cause.
//
// Not inlined: see handleFrame.
//
//go:noinline
func seqGapEnd(g *SeqGapError, st *StreamState) error {
	return &StreamError{State: st.Snapshot(), Err: g}
}

// frameDone ends the stream at `data: [DONE]`.
//
// Not inlined: see handleFrame.
//
//go:noinline
func frameDone(event string, st *StreamState, onEvent func(Event)) error {
	st.markDone()
	if onEvent != nil {
		onEvent(Event{SSEEvent: event, Done: true})
	}
	return eof(st)
}

// errorFrame is the message of an `event: error` frame: an error body, or
// one made of data that is not one.
//
// Not inlined: see handleFrame.
//
//go:noinline
func errorFrame(m Message, data []byte) Message {
	if em, ok := m.(*ErrorMessage); ok {
		em.MessageType = TypeError
		return em
	}
	return &ErrorMessage{Common: *m.Base(), ErrorType: typeInternalServerErr, Message: string(data)}
}

// frameEnd is the result of an error or cancelled frame, which ends the
// stream.
//
// Not inlined: see handleFrame.
//
//go:noinline
func frameEnd(event string, m Message, st *StreamState, now time.Time) error {
	if event == "error" {
		if st.StopReason() != "" {
			return nil
		}
		return &StreamError{InBand: m.(*ErrorMessage), State: st.Snapshot()}
	}
	if st.StopReason() == "" {
		st.Apply(&StopReason{Common: Common{MessageType: TypeStopReason}, StopReason: "cancelled"}, true, now)
	}
	return nil
}

// eof ends a stream that closed (or sent [DONE]).
func eof(st *StreamState) error {
	if st.StopReason() != "" {
		return nil
	}
	return &StreamError{State: st.Snapshot(), Err: io.ErrUnexpectedEOF}
}

// failed explains why a stream failed: which clock fired, the caller's
// cancellation, the stop grace (a success), or a cut connection.
func (s *openStream) failed(parent context.Context, st *StreamState, err error) error {
	cause := s.wd.cause()
	var cf clockFired
	switch {
	case errors.Is(cause, errStopGrace):
		return nil
	case errors.As(cause, &cf):
		return &StreamError{Clock: cf.clock, State: st.Snapshot(), Err: cause}
	case parent.Err() != nil:
		return &StreamError{Clock: ClockCanceled, State: st.Snapshot(), Err: parent.Err()}
	}
	if st.StopReason() != "" {
		return nil
	}
	snap := st.Snapshot()
	if snap.FirstByte.IsZero() {
		// Nothing was received: a plain transport failure of the request.
		return s.c.transportError(s.op, http.MethodPost, s.path, err)
	}
	return &StreamError{State: snap, Err: redactErr{err, s.c.cfg.APIKey}}
}

// watchdog runs the three clocks of one read on a single re-armed timer.
// The read path only stores a timestamp per chunk of bytes. When a clock
// fires it ends the read: before the response head by cancelling the
// request's context, after it by closing the connection.
type watchdog struct {
	st     *StreamState
	clocks Clocks
	onIdle func(time.Duration)
	start  time.Time

	firstByte atomic.Int64 // unix nanos, 0 until the first body byte
	stopAt    atomic.Int64 // unix nanos of stop_reason, 0 until then

	mu           sync.Mutex
	timer        *time.Timer
	stopped      bool
	cancel       context.CancelFunc // ends the request (until reading)
	conn         net.Conn           // closed to end the read (from reading on)
	why          error              // why the watchdog ended the read: clockFired, errStopGrace, nil
	idleNotified time.Time          // lastContent value already reported idle
	idleCount    int
}

func (w *watchdog) begin(st *StreamState, clocks Clocks, cancel context.CancelFunc, onIdle func(time.Duration), start time.Time) {
	w.st, w.clocks, w.cancel, w.onIdle, w.start = st, clocks, cancel, onIdle, start
	w.mu.Lock()
	w.timer = time.AfterFunc(clocks.Connect, w.fire)
	w.mu.Unlock()
}

// reading hands the watchdog the connection to close from now on. It
// reports false when a clock fired already (the caller closes conn).
func (w *watchdog) reading(conn net.Conn) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return false
	}
	w.conn, w.cancel = conn, nil
	return true
}

// release takes the connection back from a watchdog that has not ended
// the read: from then on no clock and no end of the caller's context
// touches it. It reports false when the watchdog ended the read already
// (the connection is closed, or closing).
func (w *watchdog) release() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return false
	}
	w.stopped, w.conn = true, nil
	w.timer.Stop()
	return true
}

// parentDone ends the read when the caller's context ends.
func (w *watchdog) parentDone() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.endLocked(nil)
	}
}

// endLocked ends the read for why. Call with mu held.
func (w *watchdog) endLocked(why error) {
	w.stopped, w.why = true, why
	if w.cancel != nil {
		w.cancel()
	}
	if w.conn != nil {
		_ = w.conn.Close()
	}
}

// cause is why the watchdog ended the read, nil if it did not (or the
// caller's context ended).
func (w *watchdog) cause() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.why
}

func (w *watchdog) onBytes(int) {
	now := time.Now().UnixNano()
	w.st.touch(now)
	if w.firstByte.Load() == 0 && w.firstByte.CompareAndSwap(0, now) {
		w.st.markFirstByte(time.Unix(0, now))
		w.rearm(time.Unix(0, now))
	}
}

func (w *watchdog) stopReasonAt(t time.Time) {
	if w.stopAt.CompareAndSwap(0, t.UnixNano()) {
		w.rearm(t)
	}
}

func (w *watchdog) rearm(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	w.timer.Reset(w.next(now))
}

func (w *watchdog) stop() {
	w.mu.Lock()
	w.stopped = true
	if w.timer != nil {
		w.timer.Stop()
	}
	w.mu.Unlock()
}

// next returns how long until the nearest deadline. Call with mu held.
func (w *watchdog) next(now time.Time) time.Duration {
	fb := w.firstByte.Load()
	if fb == 0 {
		return w.start.Add(w.clocks.Connect).Sub(now)
	}
	deadline := time.Unix(0, fb).Add(w.clocks.Total)
	if lb := w.st.lastByte.Load(); lb != 0 {
		if d := time.Unix(0, lb).Add(w.clocks.Stall); d.Before(deadline) {
			deadline = d
		}
	}
	if sa := w.stopAt.Load(); sa != 0 {
		if d := time.Unix(0, sa).Add(w.clocks.StopGrace); d.Before(deadline) {
			deadline = d
		}
	}
	if w.onIdle != nil && w.clocks.ContentIdle > 0 && w.stopAt.Load() == 0 {
		lc := w.st.lastContentAt()
		if !lc.IsZero() {
			d := lc.Add(time.Duration(w.idleCountFor(lc)+1) * w.clocks.ContentIdle)
			if d.Before(deadline) {
				deadline = d
			}
		}
	}
	return deadline.Sub(now)
}

func (w *watchdog) idleCountFor(lc time.Time) int {
	if !w.idleNotified.Equal(lc) {
		return 0
	}
	return w.idleCount
}

func (w *watchdog) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	now := time.Now()
	fb := w.firstByte.Load()
	if fb == 0 {
		if !now.Before(w.start.Add(w.clocks.Connect)) {
			w.endLocked(clockFired{ClockConnect})
			return
		}
	} else {
		if sa := w.stopAt.Load(); sa != 0 && !now.Before(time.Unix(0, sa).Add(w.clocks.StopGrace)) {
			w.endLocked(errStopGrace)
			return
		}
		if !now.Before(time.Unix(0, fb).Add(w.clocks.Total)) {
			w.endLocked(clockFired{ClockTotal})
			return
		}
		if lb := w.st.lastByte.Load(); lb != 0 && !now.Before(time.Unix(0, lb).Add(w.clocks.Stall)) {
			w.endLocked(clockFired{ClockStall})
			return
		}
		if w.onIdle != nil && w.clocks.ContentIdle > 0 && w.stopAt.Load() == 0 {
			lc := w.st.lastContentAt()
			n := w.idleCountFor(lc)
			if !lc.IsZero() && !now.Before(lc.Add(time.Duration(n+1)*w.clocks.ContentIdle)) {
				w.idleNotified, w.idleCount = lc, n+1
				w.onIdle(now.Sub(lc))
			}
		}
	}
	w.timer.Reset(max(w.next(now), time.Millisecond))
}
