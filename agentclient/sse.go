package agentclient

import (
	"bytes"
	"errors"
	"io"
	"sync"
)

// DefaultMaxLineBytes bounds one SSE line. Letta sends one compact JSON object
// per data line; 8 MiB leaves room for large tool returns while keeping a
// misbehaving peer from growing memory without bound.
const DefaultMaxLineBytes = 8 << 20

// ErrLineTooLong is returned (wrapped) when an SSE line exceeds the limit.
var ErrLineTooLong = errors.New("agentclient: SSE line too long")

// sseFrame is one dispatched server-sent event: the value of its `event:`
// field ("" when absent) and its data lines joined by '\n'.
type sseFrame struct {
	Event string
	Data  []byte
}

// byteSource is where an sseReader's bytes come from.
type byteSource interface {
	// read reads once into rd.space(). A source that can wait for bytes
	// without a buffer (waitsBare) calls space only once bytes are there,
	// and unspace when the read found none after all.
	read(rd *sseReader) (int, error)
	// waitsBare reports whether read holds no buffer while it waits.
	waitsBare() bool
}

// errPending is how a stepwise stream's read path says that the stream has
// no bytes to read yet (StreamOptions.Stepwise): the stream stays open in
// its StreamState, and the call returns with StreamState.Pending true.
var errPending = errors.New("agentclient: the stream waits for the agent to send more")

// readerSource reads an io.Reader (net/http's body, a TLS connection): its
// Read needs the buffer while it waits.
type readerSource struct{ r io.Reader }

func (s readerSource) read(rd *sseReader) (int, error) { return s.r.Read(rd.space()) }
func (readerSource) waitsBare() bool                   { return false }

// sseReader parses the text/event-stream framing: lines ending in "\n" or
// "\r\n", `field: value` pairs, a blank line dispatching the event. Comment
// lines (":…"), `id:` and `retry:` are ignored. Data of an event that is not
// terminated by a blank line before EOF is discarded, as the SSE spec says:
// a cut stream never yields half a JSON object.
//
// Memory: a stream waits far longer than it reads, so the reader keeps no
// buffer while it waits when its source allows it (a dedicated stream's TCP
// connection): it takes a pooled buffer when bytes arrive and gives it back
// once they are parsed. Otherwise it keeps one small buffer. Either grows
// for a long line and is let go after it.
type sseReader struct {
	src    byteSource
	dec    bodyDecoder
	buf    []byte
	pooled *[]byte // buf's pool entry, nil when buf is the reader's own
	r, w   int     // buf[r:w]: body bytes not parsed yet
	raw    int     // buf[w:raw]: raw bytes not decoded yet (a chunk line's start)
	seen   int     // buf[r:r+seen] holds no '\n'
	err    error   // the source's error, returned once what was read is parsed

	max      int // bound of a line
	maxEvent int // bound of an event's data lines joined
	// The event being read: its data is the one line buf[ds:de] while ds >=
	// 0, else data (several lines joined, or a line kept across a read).
	data    []byte
	ds, de  int
	hasData bool
	bare    bool // src waits without a buffer: buf is pooled, and handed back while idle (beside hasData: no padding, see TestOpenStreamSizeClass)
	resume  bool // Next returned errPending: the next call goes on with the event it was reading
	waited  bool // fill returned errPending: the next fill only reads
	event   string
	// onBytes is called with the number of body bytes read, before they
	// are parsed, so the caller's stall clock sees every byte (pings
	// included). A chunked body's framing is not counted: net/http's body
	// does not hand it on either.
	onBytes func(n int)
	// ping is the stream's last ping, handed on again for every ping that
	// repeats it (see decodeStreamMessage).
	ping *Ping
}

// sseBufferSize is the buffer a reader keeps when its source needs one
// while it waits: sized for the common event (pings and most messages are a
// few hundred bytes); longer lines grow it.
const sseBufferSize = 1 << 10

// readBufSize is the size of the pooled buffers (and of the response-head
// reader, whose left-over bytes move into one).
const readBufSize = 4 << 10

var readBufs = sync.Pool{New: func() any { b := make([]byte, readBufSize); return &b }}

// scratchKeep bounds the buffers a stream keeps between events: one large
// tool return must not pin its size for the rest of the turn.
const scratchKeep = 16 << 10

func newSSEReader(r io.Reader, max, maxEvent int, onBytes func(int)) *sseReader {
	rd := &sseReader{}
	rd.init(readerSource{r}, bodyDecoder{}, max, maxEvent, onBytes)
	return rd
}

func (s *sseReader) init(src byteSource, dec bodyDecoder, max, maxEvent int, onBytes func(int)) {
	if max <= 0 {
		max = DefaultMaxLineBytes
	}
	if maxEvent <= 0 {
		maxEvent = DefaultMaxEventBytes
	}
	*s = sseReader{src: src, bare: src.waitsBare(), dec: dec, max: max, maxEvent: maxEvent, ds: -1, onBytes: onBytes}
	if dec.done {
		s.err = io.EOF // an empty body: nothing to read
	}
}

// prime hands the reader raw bytes read before it existed (the part of the
// body that came with the response head). It counts them as read.
func (s *sseReader) prime(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	for len(s.space()) < len(b) {
		if err := s.grow(); err != nil {
			return err
		}
	}
	s.took(copy(s.space(), b), nil)
	return nil
}

func (s *sseReader) lineTooLong() error {
	return overLimit(ErrLineTooLong, s.max, "MaxLineBytes")
}

// space is where the source reads next: the buffer's free end. A reader
// that has no buffer takes one (pooled when the source waits bare).
func (s *sseReader) space() []byte {
	if s.buf == nil {
		if s.bare {
			s.pooled = readBufs.Get().(*[]byte)
			s.buf = *s.pooled
		} else {
			s.buf = make([]byte, sseBufferSize)
		}
	}
	return s.buf[s.raw:]
}

// unspace undoes space when the source found nothing to read.
func (s *sseReader) unspace() {
	if s.raw == 0 {
		s.release()
	}
}

// release lets go of the buffer: a pooled one goes back to the pool, and
// one grown past scratchKeep is dropped. Call with nothing buffered.
func (s *sseReader) release() {
	if s.pooled != nil {
		readBufs.Put(s.pooled)
		s.pooled, s.buf = nil, nil
	} else if s.bare || cap(s.buf) > scratchKeep {
		s.buf = nil
	}
}

// grow makes room in a full buffer for a line longer than it, bounded by
// the line limit (plus a chunk line, which may sit behind it).
func (s *sseReader) grow() error {
	limit := s.max + 2 + maxChunkLine
	if len(s.buf) >= limit {
		return s.lineTooLong()
	}
	nb := make([]byte, min(max(2*len(s.buf), readBufSize), limit))
	copy(nb, s.buf[:s.raw])
	if s.pooled != nil {
		readBufs.Put(s.pooled)
		s.pooled = nil
	}
	s.buf = nb
	return nil
}

// took accounts for n raw bytes the source put at buf[raw:], and for the
// error it returned with them (kept until what was read is parsed).
func (s *sseReader) took(n int, err error) {
	if n > 0 {
		s.raw += n
		body, used, derr := s.dec.decode(s.buf[s.w:s.raw])
		if body > 0 && s.onBytes != nil {
			s.onBytes(body)
		}
		tail := copy(s.buf[s.w+body:], s.buf[s.w+used:s.raw])
		s.w += body
		s.raw = s.w + tail
		switch {
		case derr != nil:
			err = derr
		case s.dec.bad:
			err = errChunkTrailer
		case s.dec.end:
			s.raw = s.w // anything after the body is not ours
			err = io.EOF
		}
	}
	if err != nil && s.err == nil {
		if err == io.EOF {
			err = s.dec.atEOF()
		}
		s.err = err
	}
}

// fill reads more bytes. Before it may wait, the reader keeps nothing it
// need not: the event's data line moves out of the buffer, and an empty
// pooled buffer goes back.
func (s *sseReader) fill() error {
	if s.waited {
		// The source read what it waited for into space() already: what
		// follows must not move or let go of the buffer.
		s.waited = false
		return s.read()
	}
	if s.err != nil {
		return s.err
	}
	if s.ds >= 0 {
		s.data = appendBounded(s.data[:0], s.buf[s.ds:s.de], s.maxEvent)
		s.ds = -1
	}
	switch {
	case s.r == s.raw:
		s.r, s.w, s.raw = 0, 0, 0
		if s.buf != nil && (s.bare || cap(s.buf) > scratchKeep) {
			s.release()
		}
	case s.r > 0:
		s.raw = copy(s.buf, s.buf[s.r:s.raw])
		s.w -= s.r
		s.r = 0
	}
	if s.buf != nil && s.raw == len(s.buf) {
		if err := s.grow(); err != nil {
			return err
		}
	}
	return s.read()
}

// read reads once from the source.
func (s *sseReader) read() error {
	n, err := s.src.read(s)
	if err == errPending {
		// Nothing read: the caller waits (the source reads what it waited
		// for into space()) and calls again.
		s.waited = true
		return err
	}
	s.took(n, err)
	return nil
}

// more reads more bytes when buf[r:w] holds no complete line. At EOF a
// partial line is dropped.
func (s *sseReader) more() error {
	s.seen = s.w - s.r
	if s.seen > s.max+1 { // the line and a CR already pass the bound
		return s.lineTooLong()
	}
	return s.fill()
}

// Next returns the next complete event. The frame's slices are valid until
// the next call. At the end of input it returns io.EOF (or the read error).
// (It finds lines itself, and reads through more and fill: the frames a
// stream waits under stay few and small.)
func (s *sseReader) Next() (sseFrame, error) {
	if s.resume {
		s.resume = false // the event read before the park goes on
	} else {
		if cap(s.data) > scratchKeep {
			s.data = nil
		}
		s.data, s.ds, s.hasData, s.event = s.data[:0], -1, false, ""
	}
	for {
		i := bytes.IndexByte(s.buf[s.r+s.seen:s.w], '\n')
		if i < 0 {
			if err := s.more(); err != nil {
				s.resume = err == errPending
				return sseFrame{}, err
			}
			continue
		}
		a, b := s.r, s.r+s.seen+i
		s.r, s.seen = b+1, 0
		if b-a > s.max {
			return sseFrame{}, s.lineTooLong()
		}
		if b > a && s.buf[b-1] == '\r' {
			b--
		}
		if a == b {
			if !s.hasData {
				// A blank line with no data dispatches nothing (spec);
				// reset the event name as the spec does.
				s.event = ""
				continue
			}
			fr := sseFrame{Event: s.event, Data: s.data}
			if s.ds >= 0 {
				fr.Data = s.buf[s.ds:s.de]
			}
			return fr, nil
		}
		if err := s.field(a, b); err != nil {
			return sseFrame{}, err
		}
	}
}

// field takes in the line buf[a:b]: a data or event field (others, and
// comments, are ignored).
func (s *sseReader) field(a, b int) error {
	line := s.buf[a:b]
	if line[0] == ':' {
		return nil
	}
	field, value := line, []byte(nil)
	vs := b
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		field, value, vs = line[:i], line[i+1:], a+i+1
		if len(value) > 0 && value[0] == ' ' {
			value, vs = value[1:], vs+1
		}
	}
	switch string(field) {
	case "data":
		return s.addData(value, vs)
	case "event":
		s.event = eventName(value)
	}
	return nil
}

// addData adds a data line, buf[vs:vs+len(value)], to the event.
func (s *sseReader) addData(value []byte, vs int) error {
	if !s.hasData {
		if len(value) > s.maxEvent {
			return overLimit(ErrEventTooLong, s.maxEvent, "MaxEventBytes")
		}
		s.hasData, s.ds, s.de = true, vs, vs+len(value)
		return nil
	}
	if s.ds >= 0 {
		s.data = appendBounded(s.data[:0], s.buf[s.ds:s.de], s.maxEvent)
		s.ds = -1
	}
	if len(s.data)+1+len(value) > s.maxEvent {
		return overLimit(ErrEventTooLong, s.maxEvent, "MaxEventBytes")
	}
	s.data = appendBounded(s.data, []byte{'\n'}, s.maxEvent)
	s.data = appendBounded(s.data, value, s.maxEvent)
	return nil
}

// eventName returns the frame's event name, without allocating for the
// names Letta sends.
func eventName(b []byte) string {
	switch string(b) {
	case "message":
		return "message"
	case "error":
		return "error"
	case "cancelled":
		return "cancelled"
	}
	return string(b)
}

// close gives a pooled buffer back. The reader is not used after.
func (s *sseReader) close() {
	if s.pooled != nil {
		readBufs.Put(s.pooled)
		s.pooled = nil
	}
	s.buf = nil
}
