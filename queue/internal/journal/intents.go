package journal

import (
	"errors"

	"github.com/lettaq/lettaq/queue/record"
)

// LiveIntents returns the intents that may have led to a stored message:
// each refusal removes the latest earlier intent of the same attempt, and
// is itself dropped. Anything else (a 5xx, a cut connection, a crash) keeps
// the intent live.
func LiveIntents(intents []record.Intent) []record.Intent {
	out := make([]record.Intent, 0, len(intents))
	for _, in := range intents {
		if !in.Refused {
			out = append(out, in)
			continue
		}
		for i := len(out) - 1; i >= 0; i-- {
			if out[i].Attempt == in.Attempt {
				out = append(out[:i], out[i+1:]...)
				break
			}
		}
	}
	return out
}

// ErrNotFound: the journal has no record of the turn, or it has expired.
var ErrNotFound = errors.New("queue: turn record not found")
