// Package envvar describes lettaq's environment variables and the command-line flags that
// override them, and parses their values: one Var type and one set of parsers for the time
// budget's variables (budget.Vars) and the commands' (internal/app), so that a value is read
// the same way and refused with the same words wherever it is set.
package envvar

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Var describes one environment variable, with the flag that overrides it, for
// docs/configuration.md and the commands' --help.
type Var struct {
	Name    string // e.g. "LETTAQ_STALL_TIMEOUT"
	Flag    string // e.g. "stall-timeout" (see FlagName)
	Default string // the default value as it would be written in the environment, e.g. "75s"
	Help    string // one line: what it sets
	Secret  bool   // never print the value: only "set" or "unset"
	Bool    bool   // the flag may be given without a value
	Budget  bool   // one of the time budget's variables (budget.Vars)
}

// FlagName returns the command-line flag that sets the same value as the variable env: its
// name without "LETTAQ_", lower-cased, with "_" → "-" (LETTAQ_STALL_TIMEOUT → "stall-timeout").
func FlagName(env string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(env, "LETTAQ_")), "_", "-")
}

// ParseBool reads a boolean: true/false, 1/0, t/f, yes/no, y/n, on/off, in any case.
func ParseBool(raw string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(raw)) {
	case "1", "t", "true", "y", "yes", "on":
		return true, nil
	case "0", "f", "false", "n", "no", "off":
		return false, nil
	}
	return false, errors.New("not a boolean (want true or false)")
}

// ParseDuration reads a duration in Go's syntax ("75s", "1m30s", "500ms"); its error says
// how to write one ("5" lacks a unit: 5s).
func ParseDuration(raw string) (time.Duration, error) {
	s := strings.TrimSpace(raw)
	d, err := time.ParseDuration(s)
	if err == nil {
		return d, nil
	}
	if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
		return 0, fmt.Errorf("write a duration with a unit, e.g. %ss or %sm", s, s)
	}
	return 0, errors.New("write a duration with a unit, e.g. 500ms, 5s or 2m")
}

// ParseFloat reads a decimal number; its error gives the reason only (strconv's repeats the
// value, which the caller's error names already).
func ParseFloat(raw string) (float64, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(raw), 64)
	if err != nil {
		return 0, errors.Unwrap(err)
	}
	return f, nil
}

// ParseInt reads a whole number.
func ParseInt(raw string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(raw))
	if err != nil {
		return 0, errors.New("write a whole number, e.g. 10")
	}
	return n, nil
}
