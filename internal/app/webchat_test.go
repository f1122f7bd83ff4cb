package app

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The chat page is behind the listener's token, as the monitor is: Bearer or basic auth, or
// ?token= once at /chat/ (a cookie for /chat/ only, the token dropped from the address);
// another site's page cannot post to it.
func TestChatPageAuth(t *testing.T) {
	chat := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("chat " + r.URL.Path)) })
	h, closeMon := NewHTTPHandler(HTTPOptions{Token: "s3cret", Chat: chat, Metrics: NewMetrics(nil)})
	defer closeMon()
	ts := httptest.NewServer(h)
	defer ts.Close()
	c := ts.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	do := func(method, path string, hdr map[string]string, ck *http.Cookie) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader("{}"))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		if ck != nil {
			req.AddCookie(ck)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 512)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		return resp, b.String()
	}
	if r, _ := do("GET", "/chat/", nil, nil); r.StatusCode != http.StatusUnauthorized {
		t.Errorf("/chat/ without the token = %d", r.StatusCode)
	}
	if r, body := do("GET", "/chat/events", map[string]string{"Authorization": "Bearer s3cret"}, nil); r.StatusCode != 200 || body != "chat /events" {
		t.Errorf("/chat/events with the token = %d %q (the page's handler sees paths below /chat)", r.StatusCode, body)
	}
	r, _ := do("GET", "/chat/?token=s3cret", nil, nil)
	var cookie *http.Cookie
	for _, ck := range r.Cookies() {
		if ck.Name == tokenCookie {
			cookie = ck
		}
	}
	if r.StatusCode != http.StatusFound || strings.Contains(r.Header.Get("Location"), "s3cret") || cookie == nil || cookie.Path != "/chat/" || !cookie.HttpOnly {
		t.Fatalf("/chat/?token= = %d Location %q cookie %+v", r.StatusCode, r.Header.Get("Location"), cookie)
	}
	if r, _ := do("GET", "/chat/events?chat=x", nil, cookie); r.StatusCode != 200 {
		t.Errorf("/chat/events with the cookie = %d", r.StatusCode)
	}
	if r, _ := do("GET", "/metrics", nil, cookie); r.StatusCode != http.StatusUnauthorized {
		t.Errorf("the chat's cookie opened /metrics")
	}
	if r, _ := do("GET", "/chat", nil, nil); r.StatusCode != http.StatusMovedPermanently || r.Header.Get("Location") != "/chat/" {
		t.Errorf("/chat = %d %q", r.StatusCode, r.Header.Get("Location"))
	}
	cross := map[string]string{"Authorization": "Bearer s3cret", "Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"}
	if r, _ := do("POST", "/chat/send", cross, nil); r.StatusCode != http.StatusForbidden {
		t.Errorf("a cross-site POST /chat/send = %d, want 403", r.StatusCode)
	}
}
