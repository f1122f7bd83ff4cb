package telegramfake

import (
	"fmt"
	"html"
	"strings"
	"unicode/utf16"
)

// htmlTags are the tags Telegram's HTML parse mode accepts.
var htmlTags = map[string]bool{
	"b": true, "strong": true, "i": true, "em": true, "u": true, "ins": true, "s": true, "strike": true,
	"del": true, "span": true, "tg-spoiler": true, "a": true, "code": true, "pre": true,
	"blockquote": true, "tg-emoji": true,
}

// parseHTML returns the text Telegram shows for s in parse mode HTML, or the
// "can't parse entities" error Telegram answers: an unknown tag, an end tag
// without its start, a start tag never closed.
func parseHTML(s string) (string, error) {
	var out strings.Builder
	var open []string
	for i := 0; i < len(s); {
		c := s[i]
		if c != '<' {
			j := strings.IndexByte(s[i:], '<')
			if j < 0 {
				j = len(s) - i
			}
			out.WriteString(html.UnescapeString(s[i : i+j]))
			i += j
			continue
		}
		end := strings.IndexByte(s[i:], '>')
		if end < 0 {
			return "", fmt.Errorf("can't parse entities: Unclosed start tag at byte offset %d", i)
		}
		tag := s[i+1 : i+end]
		closing := strings.HasPrefix(tag, "/")
		name := strings.ToLower(strings.Fields(strings.TrimPrefix(tag, "/") + " ")[0])
		if name == "" || !htmlTags[name] {
			kind := "start"
			if closing {
				kind = "end"
			}
			return "", fmt.Errorf("can't parse entities: Unsupported %s tag %q at byte offset %d", kind, name, i)
		}
		if closing {
			if len(open) == 0 || open[len(open)-1] != name {
				return "", fmt.Errorf("can't parse entities: Unmatched end tag at byte offset %d, expected \"</%s>\", found \"</%s>\"", i, last(open), name)
			}
			open = open[:len(open)-1]
		} else {
			open = append(open, name)
		}
		i += end + 1
	}
	if len(open) > 0 {
		return "", fmt.Errorf("can't parse entities: Can't find end tag corresponding to start tag %q", open[len(open)-1])
	}
	return out.String(), nil
}

func last(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}

// utf16Len is the length of s as Telegram counts it.
func utf16Len(s string) int { return len(utf16.Encode([]rune(s))) }
