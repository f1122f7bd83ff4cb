package app

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// URL-shaped settings (REDIS_URL, LETTA_BASE_URL) may carry a password in
// their user info. Nothing printed shows it: not the URL (redactURL), and
// not a parser's error, which quotes the URL or the part of the password
// it took for a port or an escape (urlParseError). A password holding a
// character that ends the user info early is refused before it is parsed
// (checkURLUserinfo): parsed, it would become part of the host.

// userinfoBounds returns where the user info of s lies (from after "//",
// or the start, to the last '@'), or ok false when s has no '@'.
func userinfoBounds(s string) (start, end int, ok bool) {
	end = strings.LastIndex(s, "@")
	if end < 0 {
		return 0, 0, false
	}
	if i := strings.Index(s, "//"); i >= 0 && i < end {
		start = i + 2
	}
	return start, end, true
}

// redactURL returns s with its user info (everything up to the last '@')
// shown as xxx, whatever it holds.
func redactURL(s string) string {
	start, end, ok := userinfoBounds(s)
	if !ok {
		return s
	}
	return s[:start] + "xxx@" + s[end+1:]
}

// checkURLUserinfo refuses user info that a URL parser does not read as
// user info: a '/', '?', '#' or '@' in the password ends it early, and a
// '%' that does not start a percent escape is an error. The error names the
// character only.
func checkURLUserinfo(s string) error {
	start, end, ok := userinfoBounds(s)
	if !ok {
		return nil
	}
	info := s[start:end]
	for k := 0; k < len(info); k++ {
		switch c := info[k]; c {
		case '/', '?', '#', '@':
			return fmt.Errorf("the user name or password (before the last '@') holds a %q, which a URL reads as the end of the host: percent-encode it as %%%02X", c, c)
		case '%':
			if k+2 >= len(info) || !isHex(info[k+1]) || !isHex(info[k+2]) {
				return errors.New("the user name or password (before the last '@') holds a '%' that does not start a percent escape: write it as %25")
			}
		}
	}
	return nil
}

func isHex(c byte) bool {
	return ('0' <= c && c <= '9') || ('a' <= c && c <= 'f') || ('A' <= c && c <= 'F')
}

// urlParseError returns the text of err, an error from parsing the URL s,
// without s: a *url.Error's quote of s is dropped, and whatever of s's user
// info (as written or unescaped) remains is shown as xxx.
func urlParseError(err error, s string) string {
	msg := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) {
		msg = strings.Replace(msg, ue.Error(), ue.Err.Error(), 1)
	}
	start, end, ok := userinfoBounds(s)
	if !ok || start == end {
		return msg
	}
	info := s[start:end]
	parts := []string{info}
	if u, err := url.PathUnescape(info); err == nil {
		parts = append(parts, u)
	}
	if _, pw, ok := strings.Cut(info, ":"); ok && pw != "" {
		parts = append(parts, pw)
	}
	for _, p := range parts {
		msg = strings.ReplaceAll(msg, p, "xxx")
	}
	return msg
}

// checkLettaBaseURL refuses a Letta base URL that is not http(s) or carries
// credentials (the key is LETTA_API_KEY). The error never shows the
// credentials.
func checkLettaBaseURL(raw string) error {
	if !strings.HasPrefix(raw, "http://") && !strings.HasPrefix(raw, "https://") {
		return errors.New("want http(s)://host[:port]")
	}
	if err := checkURLUserinfo(raw); err != nil {
		return err
	}
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New(urlParseError(err, raw))
	}
	if u.User != nil {
		return errors.New("must not carry a user name or password (before '@'): give the key as LETTA_API_KEY")
	}
	return nil
}
