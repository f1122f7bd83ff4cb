package app

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
)

// readOnlyBanner is shown at the top of every monitor page when the monitor is read-only
// (asynqmon then just leaves its buttons out, which looks like a broken page).
// It sits in the page's flow above asynqmon's root, which it makes the containing block of
// asynqmon's absolutely placed header, so the banner pushes the header down instead of covering
// its menu button and title.
const readOnlyBanner = `<style>#root{position:relative}</style>` +
	`<div id="lettaq-read-only" style="background:#fff3cd;color:#664d03;` +
	`border-bottom:1px solid #ffe69c;font:14px/1.4 system-ui,sans-serif;padding:6px 16px;text-align:center">` +
	`<b>Read-only monitor.</b> It shows queues and tasks but cannot run, retry, delete, archive or pause them ` +
	`(lettaq worker: LETTAQ_MONITOR_WRITABLE=false). A turn's Result starts with a one-line "summary". ` +
	`A waiting turn is under Scheduled (its time is only a safety net): /turns/&lt;task id&gt; says what it waits behind.</div>`

// monitorPages puts readOnlyBanner into the monitor's HTML pages when readOnly; its API
// (/monitor/api/…) and assets pass through untouched.
func monitorPages(mon http.Handler, readOnly bool) http.Handler {
	if !readOnly {
		return mon
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || strings.Contains(r.URL.Path, "/api/") {
			mon.ServeHTTP(w, r)
			return
		}
		bw := &bufferedResponse{header: w.Header(), code: http.StatusOK}
		mon.ServeHTTP(bw, r)
		body := bw.buf.Bytes()
		ct := w.Header().Get("Content-Type")
		if ct == "" {
			ct = http.DetectContentType(body)
			w.Header().Set("Content-Type", ct)
		}
		if strings.HasPrefix(ct, "text/html") {
			body = bytes.Replace(body, []byte("<body>"), []byte("<body>"+readOnlyBanner), 1)
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		}
		w.WriteHeader(bw.code)
		_, _ = w.Write(body)
	})
}

// bufferedResponse holds a response's status and body; headers go to the real writer's map.
type bufferedResponse struct {
	header http.Header
	code   int
	buf    bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header         { return b.header }
func (b *bufferedResponse) WriteHeader(code int)        { b.code = code }
func (b *bufferedResponse) Write(p []byte) (int, error) { return b.buf.Write(p) }
