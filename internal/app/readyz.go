package app

import (
	"encoding/json"
	"net/http"
)

// readyzHandler answers /readyz from the probe's last check (never waits on Redis): 200
// {"status":"ready"} or 503 {"status":"not ready"}, without authentication and without
// details. /readyz?verbose=1 (behind the token, through auth) adds why: {"redis": "ok" or the
// error, "worker": "ok" or why not}.
func readyzHandler(probe *redisProbe, ready func() error, auth func(http.Handler) http.Handler) http.Handler {
	state := func() (int, map[string]string) {
		code, details := http.StatusOK, map[string]string{"status": "ready", "redis": "ok"}
		if probe == nil {
			details["redis"], code = "not configured", http.StatusServiceUnavailable
		} else if err := probe.Err(); err != nil {
			details["redis"], code = err.Error(), http.StatusServiceUnavailable
		}
		if ready != nil {
			if err := ready(); err != nil {
				details["worker"], code = err.Error(), http.StatusServiceUnavailable
			} else {
				details["worker"] = "ok"
			}
		}
		if code != http.StatusOK {
			details["status"] = "not ready"
		}
		return code, details
	}
	write := func(w http.ResponseWriter, code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	verbose := auth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, details := state()
		write(w, code, details)
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("verbose") {
			verbose.ServeHTTP(w, r)
			return
		}
		code, details := state()
		write(w, code, map[string]string{"status": details["status"]})
	})
}
