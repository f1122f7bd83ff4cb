package lettasim

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// directive is what [[sim ...]] blocks in a message's text ask for.
type directive struct {
	script   *Script // nil: the agent's script
	fault    Fault   // applies when hasFault and the otid's attempt number <= times
	hasFault bool
	times    int        // 0: every attempt
	list     *ListFault // set on the agent when the fault applies
	stripped string     // the text without the directives
	busyForm string     // "hosted" or "detail": the form of a 409 busy answer to this send
}

const directiveOpen = "[[sim"

// parseDirectives finds every [[sim key=value ...]] block in text. See the package doc for the
// grammar.
func parseDirectives(text string) (directive, error) {
	d := directive{times: 1}
	if !strings.Contains(text, directiveOpen) {
		d.stripped = text // what the loop below makes of it, without its copies
		return d, nil
	}
	var kept strings.Builder
	var spec scriptSpec
	rest := text
	found := false
	for {
		i := strings.Index(rest, directiveOpen)
		if i < 0 {
			kept.WriteString(rest)
			break
		}
		after := rest[i+len(directiveOpen):]
		if after != "" && after[0] != ']' && after[0] != ' ' && after[0] != '\t' && after[0] != '\n' {
			// "[[simulate" etc.: not a directive
			kept.WriteString(rest[:i+len(directiveOpen)])
			rest = after
			continue
		}
		j := strings.Index(after, "]]")
		if j < 0 {
			return d, fmt.Errorf("lettasim directive: %q is not closed with ]]", rest[i:])
		}
		found = true
		kept.WriteString(rest[:i])
		toks, err := tokenize(after[:j])
		if err != nil {
			return d, err
		}
		for _, tok := range toks {
			if err := d.apply(tok[0], tok[1], &spec); err != nil {
				return d, err
			}
		}
		rest = after[j+2:]
	}
	d.stripped = strings.Join(strings.Fields(kept.String()), " ")
	if !found {
		d.stripped = text
	}
	if len(spec.then) > 0 && len(spec.approval) == 0 {
		return d, fmt.Errorf("lettasim directive: then_approval needs approval= (the first request)")
	}
	if spec.set {
		sc := spec.build()
		d.script = &sc
	}
	return d, nil
}

// tokenize splits `key=value key="quoted value" flag` into pairs; a bare key has value "true".
func tokenize(s string) ([][2]string, error) {
	var out [][2]string
	i := 0
	for {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
			i++
		}
		if i >= len(s) {
			return out, nil
		}
		start := i
		for i < len(s) && s[i] != '=' && s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r' {
			i++
		}
		key := s[start:i]
		if i >= len(s) || s[i] != '=' {
			out = append(out, [2]string{key, "true"})
			continue
		}
		i++ // '='
		if i < len(s) && s[i] == '"' {
			i++
			var v strings.Builder
			closed := false
			for i < len(s) {
				c := s[i]
				if c == '\\' && i+1 < len(s) {
					v.WriteByte(s[i+1])
					i += 2
					continue
				}
				if c == '"' {
					closed = true
					i++
					break
				}
				v.WriteByte(c)
				i++
			}
			if !closed {
				return nil, fmt.Errorf("lettasim directive: unterminated quote after %s=", key)
			}
			out = append(out, [2]string{key, v.String()})
			continue
		}
		start = i
		for i < len(s) && s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r' {
			i++
		}
		out = append(out, [2]string{key, s[start:i]})
	}
}

type scriptSpec struct {
	set         bool
	think       time.Duration
	reasoning   string
	tools       []string
	toolDelay   time.Duration
	toolStatus  string
	answer      string
	answerDelay time.Duration
	tokens      bool
	approval    []string // one approval request for these calls
	then        []string // after it is approved, a second request for these
	stop        string
}

// approvalStep is one ApprovalRequest step for the named tools (called in one model step).
func approvalStep(names []string, delay time.Duration) Step {
	st := Step{Kind: ApprovalRequest, ToolName: names[0], Delay: delay}
	if len(names) > 1 {
		for _, n := range names {
			st.Calls = append(st.Calls, Call{Name: n})
		}
	}
	return st
}

func splitList(v string) []string {
	var out []string
	for _, t := range strings.Split(v, ",") {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	return out
}

func (sp *scriptSpec) build() Script {
	reasoning := sp.reasoning
	if reasoning == "" {
		reasoning = "The user wrote to me. I will answer."
	}
	steps := []Step{{Kind: Reasoning, Text: reasoning, Delay: sp.think}}
	for i, name := range sp.tools {
		if i > 0 {
			steps = append(steps, Step{Kind: Reasoning, Text: "Now " + name + "."})
		}
		steps = append(steps,
			Step{Kind: ToolCall, ToolName: name},
			Step{Kind: ToolReturn, Delay: sp.toolDelay, Status: sp.toolStatus},
		)
	}
	if len(sp.tools) > 0 {
		steps = append(steps, Step{Kind: Reasoning, Text: "I have what I need."})
	}
	if len(sp.approval) > 0 {
		// The run ends with the request; the rest is what the run of an approving answer does.
		steps = append(steps, approvalStep(sp.approval, sp.answerDelay))
		// An approved tool runs tool_delay before the model goes on.
		if len(sp.then) > 0 {
			steps = append(steps, Step{Kind: Reasoning, Text: "That worked. One more thing needs approval.", Delay: sp.toolDelay},
				approvalStep(sp.then, 0), Step{Kind: Reasoning, Text: "The tool ran.", Delay: sp.toolDelay})
		} else {
			steps = append(steps, Step{Kind: Reasoning, Text: "The tool ran.", Delay: sp.toolDelay})
		}
		steps = append(steps, Step{Kind: Assistant, Text: sp.answer})
	} else {
		steps = append(steps, Step{Kind: Assistant, Text: sp.answer, Delay: sp.answerDelay})
	}
	return Script{Steps: steps, Tokens: sp.tokens, StopReason: sp.stop}
}

func parseDur(key, v string, forever bool) (time.Duration, error) {
	if forever && (v == "forever" || v == "inf") {
		return Forever, nil
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil && f >= 0 {
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("lettasim directive: %s=%q is not a duration (e.g. 180s, 1.5m, 250ms, 3)", key, v)
	}
	return d, nil
}

func parseInt(key, v string, min int) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < min {
		return 0, fmt.Errorf("lettasim directive: %s=%q must be an integer >= %d", key, v, min)
	}
	return n, nil
}

func parseBool(key, v string) (bool, error) {
	switch strings.ToLower(v) {
	case "true", "1", "yes", "on":
		return true, nil
	case "false", "0", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("lettasim directive: %s=%q must be true or false", key, v)
}

func (d *directive) apply(key, v string, sp *scriptSpec) error {
	var err error
	f := &d.fault
	fault := func() { d.hasFault = true }
	switch key {
	// script
	case "think":
		sp.set = true
		sp.think, err = parseDur(key, v, false)
	case "reasoning":
		sp.set = true
		sp.reasoning = v
	case "tool", "tools":
		sp.set = true
		sp.tools = append(sp.tools, splitList(v)...)
	case "tool_delay":
		sp.set = true
		sp.toolDelay, err = parseDur(key, v, false)
	case "tool_status":
		sp.set = true
		if v != "success" && v != "error" {
			return fmt.Errorf("lettasim directive: tool_status=%q must be success or error", v)
		}
		sp.toolStatus = v
	case "answer":
		sp.set = true
		sp.answer = v
	case "answer_delay":
		sp.set = true
		sp.answerDelay, err = parseDur(key, v, false)
	case "tokens":
		sp.set = true
		sp.tokens, err = parseBool(key, v)
	case "approval", "then_approval":
		sp.set = true
		names := splitList(v)
		if len(names) == 0 || v == "true" {
			return fmt.Errorf("lettasim directive: %s=%q must name one or more tools (a,b)", key, v)
		}
		if key == "approval" {
			sp.approval = names
		} else {
			sp.then = names
		}
	case "stop":
		sp.set = true
		if !validStopReason(v) {
			return fmt.Errorf("lettasim directive: stop=%q is not a stop reason", v)
		}
		sp.stop = v
	// faults
	case "times":
		if v == "always" || v == "all" {
			d.times = 0
			return nil
		}
		d.times, err = parseInt(key, v, 1)
	case "admit_delay":
		fault()
		f.AdmitDelay, err = parseDur(key, v, true)
	case "first_byte":
		fault()
		f.FirstByteDelay, err = parseDur(key, v, true)
	case "stall":
		fault()
		f.StallFor, err = parseDur(key, v, true)
	case "stall_after":
		fault()
		f.StallAfter, err = parseInt(key, v, 0)
	case "disconnect_after":
		fault()
		f.DisconnectAfter, err = parseInt(key, v, 1)
	case "drop":
		fault()
		f.DropBeforeResponse, err = parseBool(key, v)
	case "status":
		fault()
		var n int
		n, err = parseInt(key, v, 0)
		switch {
		case err != nil:
		case n == 429:
			f.Status429 = true
		case n >= 500 && n <= 599:
			f.Status5xxBeforeStore = n
		default:
			err = fmt.Errorf("lettasim directive: status=%q must be 429 or 5xx", v)
		}
	case "deploy_503":
		fault()
		f.Deploy503, err = parseBool(key, v)
	case "limit_429":
		fault()
		if v == "" {
			return fmt.Errorf("lettasim directive: limit_429 wants a code (rate_limit, llm_rate_limit, not-enough-credits, …)")
		}
		f.Status429Code = v
	case "busy_after_store":
		fault()
		f.BusyAfterStore, err = parseBool(key, v)
	case "pending_approval":
		fault()
		f.PendingApproval, err = parseBool(key, v)
	case "busy_form":
		if v != "hosted" && v != "detail" && v != "newer" && v != "nested" {
			return fmt.Errorf("lettasim directive: busy_form=%q must be hosted, detail, newer or nested", v)
		}
		d.busyForm = v
	case "busy":
		fault()
		f.Busy, err = parseBool(key, v)
	case "retry_after":
		fault()
		f.RetryAfter, err = parseDur(key, v, false)
	case "status_after_store":
		fault()
		f.Status5xxAfterStore, err = parseInt(key, v, 500)
		if err == nil && f.Status5xxAfterStore > 599 {
			err = fmt.Errorf("lettasim directive: status_after_store=%q must be 5xx", v)
		}
	case "end":
		fault()
		if !validStopReason(v) {
			return fmt.Errorf("lettasim directive: end=%q is not a stop reason", v)
		}
		f.EndWith = v
	case "end_after":
		fault()
		if v == "all" {
			f.EndAfter = -1
			return nil
		}
		f.EndAfter, err = parseInt(key, v, 0)
	case "error_type":
		fault()
		f.ErrorType = v
	case "exception":
		fault()
		f.UnhandledException, err = parseBool(key, v)
	case "resume":
		fault()
		f.ResumeStatus, err = parseInt(key, v, 400)
	case "ignore_starting_after":
		fault()
		f.IgnoreStartingAfter, err = parseBool(key, v)
	case "slow_list", "fail_list", "ignore_after", "reverse_order":
		fault()
		if d.list == nil {
			d.list = &ListFault{}
		}
		switch key {
		case "slow_list":
			d.list.Delay, err = parseDur(key, v, false)
		case "fail_list":
			d.list.Fail, err = parseInt(key, v, 0)
		case "ignore_after":
			d.list.IgnoreAfter, err = parseBool(key, v)
		default:
			d.list.ReverseOrder, err = parseBool(key, v)
		}
	default:
		return fmt.Errorf("lettasim directive: unknown key %q (see the lettasim package doc)", key)
	}
	return err
}
