// Package live is what an attempt's chat is told while the run at Letta goes on:
// Stream turns the continuation's activity and the agent's stream events into phase
// events (repeated by a heartbeat), answer_delta events (through the delta pump, which
// holds text until a newline or its maximum age) and tool events, and notes the phases
// in the journal's timeline through the function the attempt gives it.
//
// It decides what the chat is told; the worker's writer (queue's progress) writes it.
package live
