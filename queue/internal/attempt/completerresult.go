package attempt

import (
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/record"
)

// resultOps write the task's result (see writeResult) with the journal
// save they go with, when the worker made its Redis client from Asynq's
// connection (so Asynq's task hash is on it); else the result is written
// through Asynq now.
func (c *completer) resultOps(outcome, answer string, approval *record.ToolEvent) []store.Op {
	if !c.w.Trips.ResultWithSave {
		c.writeResult(outcome, answer, approval)
		return nil
	}
	b, err := c.resultJSON(outcome, answer, approval)
	if err != nil {
		c.log.Warn("could not write the task result", "error", err.Error())
		return nil
	}
	return []store.Op{store.WriteResultOp(c.Queue, c.TaskID, b, func(cmd *redis.Cmd) error {
		err := cmd.Err()
		if store.IsNoScript(err) {
			return err // store.Run sends it again
		}
		if err != nil {
			c.RedisFailed()
			c.log.Warn("could not write the task result", "error", err.Error())
		}
		return nil // the result is a summary: its loss does not fail the save
	})}
}

func (c *completer) writeResult(outcome, answer string, approval *record.ToolEvent) {
	b, err := c.resultJSON(outcome, answer, approval)
	if err == nil {
		_, err = c.Task.ResultWriter().Write(b)
	}
	if err != nil {
		c.RedisFailed()
		c.log.Warn("could not write the task result", "error", err.Error())
	}
}

func (c *completer) resultJSON(outcome, answer string, approval *record.ToolEvent) ([]byte, error) {
	r := TurnResult{TaskID: c.TaskID, Otid: c.Otid, RunID: c.jr.Rec().RunID, Outcome: outcome, Answer: answer,
		StopReason: c.jr.Rec().StopReason, Approval: approval, Usage: c.jr.Rec().Usage, Attempts: len(c.jr.Rec().Attempts),
		QueueWaitMS: c.jr.Rec().QueueWait.Milliseconds(), TTFTMS: c.jr.Rec().TTFT.Milliseconds(),
		LatencyMS: c.jr.Latency(time.Now()).Milliseconds(), AttemptMS: time.Since(c.Start).Milliseconds(),
		AnsweredBy: c.jr.Rec().AnsweredBy}
	for _, f := range c.line.Followers() {
		r.Merged = append(r.Merged, f.TaskID)
	}
	if r.QueueWaitMS == 0 && !c.jr.Rec().EnqueuedAt.IsZero() && !c.jr.Rec().FirstStartedAt.IsZero() {
		r.QueueWaitMS = c.jr.Rec().FirstStartedAt.Sub(c.jr.Rec().EnqueuedAt).Milliseconds()
	}
	r.Summary = r.summary()
	n := 384 + len(r.Summary) + len(r.TaskID) + len(r.Otid) + len(r.RunID) + len(r.StopReason) + len(r.AnsweredBy) +
		len(answer) + len(r.Merged)*64 // about the size: one allocation, unless strings need escaping
	if approval != nil {
		n += 96 + len(approval.Name) + len(approval.CallID) + len(approval.Arguments) + len(approval.Return)
	}
	return appendTurnResultJSON(make([]byte, 0, n), &r), nil
}
