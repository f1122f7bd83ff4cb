package app

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The listener's token: Bearer or basic auth on every protected path; the monitor's entry
// (/monitor/?token=) also takes it once in the address and answers with a session cookie
// for the monitor's own requests.

const (
	tokenCookie = "lettaq_monitor"
	// monitorEntry and chatEntry are the paths that take ?token=, each with its own cookie
	// (scoped to its path): the pages a person opens in a browser.
	monitorEntry = "/monitor/"
	chatEntry    = "/chat/"
	// sessionTTL is how long the monitor's cookie is good for.
	sessionTTL = 12 * time.Hour
)

// tokenAuth checks the token. The cookie holds no token: it is "<expiry>.<mac>", the mac an
// HMAC-SHA256 of the expiry under a key derived from the token, so it is good on every worker
// that shares the token, until it expires or the token changes, and reveals nothing of it.
type tokenAuth struct {
	token []byte
	key   []byte // HMAC key of the session cookie
	now   func() time.Time
}

func newTokenAuth(token string) *tokenAuth {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("lettaq monitor session key v1"))
	return &tokenAuth{token: []byte(token), key: m.Sum(nil), now: time.Now}
}

func (a *tokenAuth) ok(got string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), a.token) == 1
}

func (a *tokenAuth) mac(expiry string) string {
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte(expiry))
	return hex.EncodeToString(m.Sum(nil))
}

// session returns a new cookie value.
func (a *tokenAuth) session() string {
	exp := strconv.FormatInt(a.now().Add(sessionTTL).Unix(), 10)
	return exp + "." + a.mac(exp)
}

// validSession reports whether v is a cookie value session made and not expired.
func (a *tokenAuth) validSession(v string) bool {
	exp, mac, found := strings.Cut(v, ".")
	if !found {
		return false
	}
	if !hmac.Equal([]byte(mac), []byte(a.mac(exp))) {
		return false
	}
	n, err := strconv.ParseInt(exp, 10, 64)
	return err == nil && a.now().Before(time.Unix(n, 0))
}

// overTLS reports whether the client reached us over TLS, directly or through a
// TLS-terminating proxy that says so (X-Forwarded-Proto: https).
func overTLS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	proto, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Proto"), ",")
	return strings.EqualFold(strings.TrimSpace(proto), "https")
}

// bearerToken returns the token of an Authorization header of the Bearer scheme, whose name
// is case-insensitive (RFC 9110, 11.1), as are the spaces before the token.
func bearerToken(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimLeft(tok, " "), true
}

// requireToken accepts the token as "Authorization: Bearer <token>" or as the password of basic
// auth (any user name: browsers ask for it). Under /monitor/ and /chat/ it also accepts the
// session cookie, which GET /monitor/?token=<token> (or /chat/?token=) sets for that path (then
// redirects to drop the token from the address); ?token= is refused anywhere else. An empty token lets everything through.
func requireToken(token string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		if token == "" {
			return next
		}
		a := newTokenAuth(token)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if tok, ok := bearerToken(r.Header.Get("Authorization")); ok && a.ok(tok) {
				next.ServeHTTP(w, r)
				return
			}
			if _, pw, has := r.BasicAuth(); has && a.ok(pw) {
				next.ServeHTTP(w, r)
				return
			}
			entry := ""
			for _, e := range []string{monitorEntry, chatEntry} {
				if strings.HasPrefix(r.URL.Path, e) {
					entry = e
				}
			}
			if c, err := r.Cookie(tokenCookie); err == nil && entry != "" && a.validSession(c.Value) {
				next.ServeHTTP(w, r)
				return
			}
			q := r.URL.Query()
			if entry != "" && r.URL.Path == entry && (r.Method == http.MethodGet || r.Method == http.MethodHead) && a.ok(q.Get("token")) {
				http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: a.session(), Path: entry,
					MaxAge: int(sessionTTL / time.Second), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: overTLS(r)})
				// Drop the token from the address bar.
				u := *r.URL
				q.Del("token")
				u.RawQuery = q.Encode()
				http.Redirect(w, r, u.RequestURI(), http.StatusFound)
				return
			}
			w.Header().Set("WWW-Authenticate", `Basic realm="lettaq", charset="UTF-8"`)
			http.Error(w, "unauthorized: send the LETTAQ_HTTP_TOKEN as a Bearer token or as the basic-auth password (the monitor and the chat page also take it once, at "+monitorEntry+"?token= or "+chatEntry+"?token=)", http.StatusUnauthorized)
		})
	}
}
