package telegram

import (
	"html"
	"regexp"
	"strings"
)

var (
	fenceRe = regexp.MustCompile("(?s)```([A-Za-z0-9_+-]*)\n?(.*?)```")
	codeRe  = regexp.MustCompile("`([^`\n]+)`")
	boldRe  = regexp.MustCompile(`\*\*([^*\n]+)\*\*`)
)

// HTML is text (an agent's answer, Markdown-ish) in Telegram's HTML parse
// mode: <, > and & escaped, and the Markdown that reads worst as raw
// characters made entities: ```fenced code``` as <pre>, `code` as <code>,
// **bold** as <b>. Nothing else is interpreted: a marker without its pair
// stays as typed. Telegram counts a message's length after the entities
// are parsed, so the result shows at most as many characters as text.
func HTML(text string) string {
	var out strings.Builder
	last := 0
	for _, m := range fenceRe.FindAllStringSubmatchIndex(text, -1) {
		out.WriteString(inline(text[last:m[0]]))
		lang, body := text[m[2]:m[3]], html.EscapeString(text[m[4]:m[5]])
		if lang != "" {
			out.WriteString(`<pre><code class="language-` + lang + `">` + body + "</code></pre>")
		} else {
			out.WriteString("<pre>" + body + "</pre>")
		}
		last = m[1]
	}
	out.WriteString(inline(text[last:]))
	return out.String()
}

// inline converts `code` and **bold** outside fenced blocks.
func inline(s string) string {
	var out strings.Builder
	last := 0
	for _, m := range codeRe.FindAllStringSubmatchIndex(s, -1) {
		out.WriteString(bold(html.EscapeString(s[last:m[0]])))
		out.WriteString("<code>" + html.EscapeString(s[m[2]:m[3]]) + "</code>")
		last = m[1]
	}
	out.WriteString(bold(html.EscapeString(s[last:])))
	return out.String()
}

func bold(escaped string) string { return boldRe.ReplaceAllString(escaped, "<b>$1</b>") }
