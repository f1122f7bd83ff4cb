package queue

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// summaryAnswerRunes bounds the answer's part of TurnResult.Summary.
const summaryAnswerRunes = 120

// summary is TurnResult.Summary: one line an operator reads in the monitor's result column,
// e.g. "answered in 1.4s (2 attempts): you said: hi".
func (r TurnResult) summary() string {
	var b strings.Builder
	b.WriteString(r.Outcome)
	if r.LatencyMS > 0 {
		b.WriteString(" in " + (time.Duration(r.LatencyMS) * time.Millisecond).Round(100*time.Millisecond).String())
	}
	if r.Attempts > 1 {
		fmt.Fprintf(&b, " (%d attempts)", r.Attempts)
	}
	switch {
	case r.Outcome == OutcomeCoalesced && r.AnsweredBy != "":
		b.WriteString(": merged into turn " + r.AnsweredBy)
	case r.Approval != nil:
		b.WriteString(": waiting for approval of tool " + r.Approval.Name)
	case r.Answer != "":
		b.WriteString(": " + oneLine(r.Answer, summaryAnswerRunes))
	}
	if len(r.Merged) > 0 {
		fmt.Fprintf(&b, " (also answers %d merged message(s))", len(r.Merged))
	}
	return b.String()
}

// oneLine is s on one line (whitespace runs become one space), cut to n runes with "…".
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}
