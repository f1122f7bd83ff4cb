package attempt

import (
	"context"
	"log/slog"
	"sync/atomic"
)

// IDs is what every log line about a turn carries: the task id, the
// otid, and the run id once it is known (it is learned mid-turn, so it is
// read when the line is written, not when the logger is made).
type IDs struct {
	TaskID, Otid string
	runID        atomic.Pointer[string]
}

func (ids *IDs) setRunID(id string) {
	if id != "" {
		ids.runID.Store(&id)
	}
}

func (ids *IDs) runIDNow() string {
	if p := ids.runID.Load(); p != nil {
		return *p
	}
	return ""
}

// turnLogHandler adds task_id, otid and run_id to each record that does
// not carry them already (from its own attributes or the logger's With).
type turnLogHandler struct {
	inner slog.Handler
	ids   *IDs
	has   turnKeys // keys given through WithAttrs
}

type turnKeys uint8

const (
	hasTaskID turnKeys = 1 << iota
	hasOtid
	hasRunID
)

func keyOf(k string) turnKeys {
	switch k {
	case "task_id":
		return hasTaskID
	case "otid":
		return hasOtid
	case "run_id":
		return hasRunID
	}
	return 0
}

func newLogger(base *slog.Logger, ids *IDs) *slog.Logger {
	return slog.New(&turnLogHandler{inner: base.Handler(), ids: ids})
}

func (h *turnLogHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *turnLogHandler) Handle(ctx context.Context, r slog.Record) error {
	has := h.has
	r.Attrs(func(a slog.Attr) bool {
		has |= keyOf(a.Key)
		return true
	})
	if has&hasTaskID == 0 {
		r.AddAttrs(slog.String("task_id", h.ids.TaskID))
	}
	if has&hasOtid == 0 {
		r.AddAttrs(slog.String("otid", h.ids.Otid))
	}
	if has&hasRunID == 0 {
		r.AddAttrs(slog.String("run_id", h.ids.runIDNow()))
	}
	return h.inner.Handle(ctx, r)
}

func (h *turnLogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	has := h.has
	for _, a := range as {
		has |= keyOf(a.Key)
	}
	return &turnLogHandler{inner: h.inner.WithAttrs(as), ids: h.ids, has: has}
}

func (h *turnLogHandler) WithGroup(name string) slog.Handler {
	return &turnLogHandler{inner: h.inner.WithGroup(name), ids: h.ids, has: h.has}
}
