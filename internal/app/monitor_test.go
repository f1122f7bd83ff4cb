package app

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

func TestMonitorSaysItIsReadOnly(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	for _, writable := range []bool{false, true} {
		h, closeAll := NewHTTPHandler(HTTPOptions{Redis: rdb, RedisConnOpt: asynq.RedisClientOpt{Addr: mr.Addr()}, MonitorWritable: writable})
		ts := httptest.NewServer(h)
		for _, page := range []string{"/monitor/", "/monitor/queues/lettaq"} {
			code, body := get(t, ts.Client(), ts.URL+page, nil)
			banner := strings.Contains(body, `<body><div id="lettaq-read-only"`) && strings.Contains(body, "Read-only monitor.")
			if code != 200 || banner == writable || !strings.Contains(body, `<div id="root">`) {
				t.Errorf("writable %v: %s = %d, banner %v", writable, page, code, banner)
			}
		}
		// The API is untouched.
		code, body := get(t, ts.Client(), ts.URL+"/monitor/api/queues", nil)
		if code != 200 || !json.Valid([]byte(body)) || strings.Contains(body, "lettaq-read-only") {
			t.Errorf("writable %v: /monitor/api/queues = %d %q", writable, code, body)
		}
		ts.Close()
		closeAll()
	}
}
