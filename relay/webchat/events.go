package webchat

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/lettaq/lettaq/queue/record"
)

// entryID is a stream entry id as Last-Event-ID may carry it.
var entryID = regexp.MustCompile(`^[0-9]+(-[0-9]+)?$`)

// sseEvent is the data of one SSE message: the reply event (its JSON form,
// reply-events.md) and, for an accepted event of a message sent from the
// page, what the user said.
type sseEvent struct {
	Event record.ReplyEvent `json:"event"`
	Said  *Said1            `json:"said,omitempty"`
}

// events streams the chat's reply events as Server-Sent Events, each with
// the stream entry id as its SSE id, from the entry after Last-Event-ID (or
// ?after=, or the stream's start). It ends when the client goes away (its
// last read of the stream within Config.Block) or a write fails.
func (h *handler) events(w http.ResponseWriter, r *http.Request) {
	c, err := chat(r.URL.Query().Get("chat"))
	if err != nil {
		writeErr(w, http.StatusBadRequest, "chat", err.Error())
		return
	}
	after := r.Header.Get("Last-Event-ID")
	if after == "" {
		after = r.URL.Query().Get("after")
	}
	if after == "" {
		after = "0"
	}
	if !entryID.MatchString(after) {
		writeErr(w, http.StatusBadRequest, "Last-Event-ID", fmt.Sprintf("%q is not a stream entry id", trim(after, 40)))
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no") // nginx: pass each event on at once
	w.WriteHeader(http.StatusOK)
	ctx := r.Context()
	if after != "0" && h.cfg.Tail != nil {
		// The stream's tail was lost (Redis lost its last writes): newer
		// entries may have ids below the one held. Read it all again; the
		// page skips by seq what it has shown.
		if last, err := h.cfg.Tail(ctx, c); err == nil && idLess(last, after) {
			after = "0"
		}
	}
	// The browser waits this long before it reconnects.
	if _, err := fmt.Fprint(w, "retry: 1000\n\n"); err != nil || rc.Flush() != nil {
		return
	}
	lastWrite := time.Now()
	for {
		evs, next, ok, err := h.read(ctx, c, after)
		if !ok {
			return
		}
		if err != nil {
			h.log.Warn("webchat: reading the reply stream", "chat", c.String(), "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
		if len(evs) > 0 {
			said := h.said(ctx, c, evs)
			var b strings.Builder
			for _, ev := range evs {
				se := sseEvent{Event: ev}
				if ev.Type == record.EventAccepted && ev.Approval == nil {
					se.Said = said[ev.MessageID]
				}
				data, err := json.Marshal(se)
				if err != nil {
					continue
				}
				fmt.Fprintf(&b, "id: %s\ndata: %s\n\n", ev.ID, data)
			}
			if _, err := w.Write([]byte(b.String())); err != nil || rc.Flush() != nil {
				return
			}
			lastWrite = time.Now()
		} else if time.Since(lastWrite) >= h.cfg.Heartbeat-h.cfg.Block/2 {
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
			lastWrite = time.Now()
		}
		if err == nil {
			after = next
		}
	}
}

// read is one read of the stream, which returns as soon as ctx ends (ok
// false): a blocking XREAD is not interrupted by its context, and a handler
// that waited for it would hold the server's shutdown up to Config.Block. The
// read itself then ends within Block, by itself.
func (h *handler) read(ctx context.Context, c record.Conversation, after string) (evs []record.ReplyEvent, next string, ok bool, err error) {
	type result struct {
		evs  []record.ReplyEvent
		next string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		evs, next, err := h.cfg.Stream.Read(ctx, c, after, 100, h.cfg.Block)
		done <- result{evs, next, err}
	}()
	select {
	case <-ctx.Done():
		return nil, after, false, nil
	case r := <-done:
		return r.evs, r.next, ctx.Err() == nil, r.err
	}
}

// said looks up what the user said for the accepted events among evs of
// messages sent from the page, by message id.
func (h *handler) said(ctx context.Context, c record.Conversation, evs []record.ReplyEvent) map[string]*Said1 {
	if h.cfg.Said == nil {
		return nil
	}
	var ids []string
	for _, ev := range evs {
		if ev.Type == record.EventAccepted && ev.MessageID != "" && ev.Approval == nil {
			ids = append(ids, ev.MessageID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	got, err := h.cfg.Said.Get(ctx, c, ids)
	if err != nil {
		h.log.Warn("webchat: reading what the user said", "chat", c.String(), "err", err)
		return nil
	}
	out := map[string]*Said1{}
	for id, s := range got {
		out[id] = &s
	}
	return out
}

// idLess reports whether stream entry id a is below b ("" is below all).
func idLess(a, b string) bool {
	if a == "" {
		return true
	}
	ams, aseq := splitID(a)
	bms, bseq := splitID(b)
	return ams < bms || (ams == bms && aseq < bseq)
}

func splitID(id string) (ms, seq uint64) {
	m, s, _ := strings.Cut(id, "-")
	ms, _ = strconv.ParseUint(m, 10, 64)
	seq, _ = strconv.ParseUint(s, 10, 64)
	return ms, seq
}
