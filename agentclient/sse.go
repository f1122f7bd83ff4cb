package agentclient

import (
	"bufio"
	"bytes"
	"errors"
	"io"
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

// sseReader parses the text/event-stream framing: lines ending in "\n" or
// "\r\n", `field: value` pairs, a blank line dispatching the event. Comment
// lines (":…"), `id:` and `retry:` are ignored. Data of an event that is not
// terminated by a blank line before EOF is discarded, as the SSE spec says:
// a cut stream never yields half a JSON object.
type sseReader struct {
	br       *bufio.Reader
	max      int
	maxEvent int    // bound of an event's data lines joined
	line     []byte // scratch for lines longer than the bufio buffer
	event    []byte
	data     []byte
	hasData  bool
	// onBytes is called with the number of bytes consumed, before parsing
	// them, so the caller's stall clock sees every byte (pings included).
	onBytes func(n int)
}

// sseBufferSize is the reader's buffer: a stream holds it for as long as the
// agent thinks, so it is sized for the common event (pings and most messages
// are a few hundred bytes); longer lines are assembled in a scratch buffer.
const sseBufferSize = 1 << 10

// scratchKeep bounds the scratch buffers a stream keeps between events: one
// large tool return must not pin its size for the rest of the turn.
const scratchKeep = 16 << 10

func newSSEReader(r io.Reader, max, maxEvent int, onBytes func(int)) *sseReader {
	if max <= 0 {
		max = DefaultMaxLineBytes
	}
	if maxEvent <= 0 {
		maxEvent = DefaultMaxEventBytes
	}
	return &sseReader{br: bufio.NewReaderSize(r, sseBufferSize), max: max, maxEvent: maxEvent, onBytes: onBytes}
}

func (s *sseReader) lineTooLong() error {
	return overLimit(ErrLineTooLong, s.max, "MaxLineBytes")
}

// readLine returns the next line without its terminator. The returned slice
// is valid until the next call.
func (s *sseReader) readLine() ([]byte, error) {
	s.line = s.line[:0]
	for {
		chunk, err := s.br.ReadSlice('\n')
		if len(chunk) > 0 && s.onBytes != nil {
			s.onBytes(len(chunk))
		}
		if err == nil {
			var line []byte
			if len(s.line) == 0 {
				line = chunk
			} else {
				if len(s.line)+len(chunk)-1 > s.max {
					return nil, s.lineTooLong()
				}
				s.line = appendBounded(s.line, chunk, s.max+2)
				line = s.line
			}
			if len(line)-1 > s.max {
				return nil, s.lineTooLong()
			}
			line = line[:len(line)-1]
			if n := len(line); n > 0 && line[n-1] == '\r' {
				line = line[:n-1]
			}
			return line, nil
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(s.line)+len(chunk) > s.max+2 {
				return nil, s.lineTooLong()
			}
			s.line = appendBounded(s.line, chunk, s.max+2)
			continue
		}
		// EOF or a read error: a partial line without terminator is dropped.
		return nil, err
	}
}

// Next returns the next complete event. The frame's slices are valid until
// the next call. At the end of input it returns io.EOF (or the read error).
func (s *sseReader) Next() (sseFrame, error) {
	if cap(s.data) > scratchKeep {
		s.data = nil
	}
	if cap(s.line) > scratchKeep {
		s.line = nil
	}
	s.event = s.event[:0]
	s.data = s.data[:0]
	s.hasData = false
	hasEvent := false
	for {
		line, err := s.readLine()
		if err != nil {
			return sseFrame{}, err
		}
		if len(line) == 0 {
			if !s.hasData {
				// A blank line with no data dispatches nothing (spec);
				// reset the event name as the spec does.
				s.event = s.event[:0]
				hasEvent = false
				continue
			}
			ev := sseFrame{Data: s.data}
			if hasEvent {
				ev.Event = eventName(s.event)
			}
			return ev, nil
		}
		if line[0] == ':' {
			continue
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(field) {
		case "data":
			n := len(s.data) + len(value)
			if s.hasData {
				n++
			}
			if n > s.maxEvent {
				return sseFrame{}, overLimit(ErrEventTooLong, s.maxEvent, "MaxEventBytes")
			}
			if s.hasData {
				s.data = appendBounded(s.data, []byte{'\n'}, s.maxEvent)
			}
			s.data = appendBounded(s.data, value, s.maxEvent)
			s.hasData = true
		case "event":
			s.event = append(s.event[:0], value...)
			hasEvent = true
		}
	}
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
