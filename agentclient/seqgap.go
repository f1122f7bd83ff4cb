package agentclient

import (
	"errors"
	"fmt"
)

// A resumed stream starts after the seq_id it was asked for, and its chunks
// are numbered one by one. Letta keeps only the last ~10,000 chunks of a
// run's stream: a resume from an older seq_id starts at the oldest chunk
// still kept, and the chunks in between are gone. Appending what comes
// after such a gap would make a transcript with text missing in its
// middle, so a resume checks the numbering and stops at the first gap,
// before the chunk after it is applied (SeqGapError): the caller reads the
// run's messages instead, which are whole. A chunk numbered at or before
// the last one applied (a server that ignored starting_after and replays
// from the start) is dropped.

// SeqGapError is the cause (StreamError.Err) of a resumed stream that
// skipped chunks: after Want-1 came Got.
type SeqGapError struct {
	Want, Got int64
}

func (e *SeqGapError) Error() string {
	return fmt.Sprintf("resumed stream skipped chunks: seq_id %d came where %d was due (the server no longer keeps the chunks in between)", e.Got, e.Want)
}

// IsSeqGap reports whether err is a resumed stream that skipped chunks
// (see SeqGapError): read the run's messages, from its start, instead.
func IsSeqGap(err error) bool {
	var g *SeqGapError
	return errors.As(err, &g)
}

// expectSeqAfter makes the next stream read into s check that its chunks
// are numbered from after+1 on, one by one (a resume); 0 without a seq_id
// seen before is the start of the run. A send's stream does not check.
func (s *StreamState) expectSeqAfter(after int64, check bool) {
	s.mu.Lock()
	s.seqCheck, s.seqNext = check, after+1
	s.mu.Unlock()
}

// seqGap checks m's seq_id against the numbering expectSeqAfter set: the
// gap, or nil (pings repeat the last seq_id and are not checked; a stream
// without seq_ids, not background, has nothing to check). replayed says m
// numbers at or before a chunk already applied (a server that ignored
// starting_after, and replays the run from an earlier chunk): drop it,
// applying it again would append its text twice.
func (s *StreamState) seqGap(m Message) (replayed bool, gap *SeqGapError) {
	if _, ok := m.(*Ping); ok {
		return false, nil
	}
	c := m.Base()
	if c.SeqID == nil {
		return false, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.seqCheck {
		return false, nil
	}
	switch seq := *c.SeqID; {
	case seq > s.seqNext:
		s.seqCheck = false
		return false, &SeqGapError{Want: s.seqNext, Got: seq}
	case seq == s.seqNext:
		s.seqNext++
		return false, nil
	}
	return true, nil
}
