package app

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/lettaq/lettaq/internal/envvar"
)

// durationValue is a flag.Value for a duration whose errors say how to write one (the flag
// package's own answers only "parse error").
type durationValue struct{ p *time.Duration }

func (d durationValue) String() string {
	if d.p == nil {
		return ""
	}
	return d.p.String()
}

func (d durationValue) Set(s string) error {
	v, err := envvar.ParseDuration(s)
	if err != nil {
		return err
	}
	*d.p = v
	return nil
}

// positiveDurationValue is a durationValue that must be more than 0 (a wait of 0 or less
// means nothing: it used to be taken, the message enqueued, and the wait over at once).
type positiveDurationValue struct{ p *time.Duration }

func (d positiveDurationValue) String() string { return durationValue(d).String() }

func (d positiveDurationValue) Set(s string) error {
	var v time.Duration
	if err := (durationValue{&v}).Set(s); err != nil {
		return err
	}
	if v <= 0 {
		return errors.New("must be more than 0")
	}
	*d.p = v
	return nil
}

// intValue is a flag.Value for an integer whose errors say what was expected.
type intValue struct{ p *int }

func (v intValue) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.Itoa(*v.p)
}

func (v intValue) Set(s string) error {
	n, err := envvar.ParseInt(s)
	if err != nil {
		return err
	}
	*v.p = n
	return nil
}

// countValue is a flag.Value for a count that cannot be negative (a retry count: -3 used to be
// taken, and meant "no retry").
type countValue struct{ p *int }

func (v countValue) String() string { return intValue(v).String() }

func (v countValue) Set(s string) error {
	n := 0
	if err := (intValue{&n}).Set(s); err != nil {
		return err
	}
	if n < 0 {
		return errors.New("must be at least 0")
	}
	*v.p = n
	return nil
}

var flagValueErr = regexp.MustCompile(`^invalid (?:boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-(\S+): (.*)$`)

// flagError rewrites the flag package's `invalid value "5" for flag -timeout: …` as
// `--timeout "5": …`, naming the flag the way the help writes it.
func flagError(err error) error {
	if err == nil {
		return nil
	}
	m := flagValueErr.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	reason := m[3]
	if reason == "parse error" { // strconv's, for a flag.Bool
		reason = "want true or false"
	}
	return fmt.Errorf("--%s %s: %s", m[2], m[1], reason)
}
