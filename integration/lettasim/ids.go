package lettasim

import (
	"net/http"
	"regexp"
)

// Path parameter patterns of Letta's OpenAPI document: a malformed id answers 422 before any
// lookup (so "agent-demo" is refused as a real server refuses it, not "not found").
const (
	uuid4Pattern = `[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}`

	agentIDPattern = `^agent-` + uuid4Pattern + `$`
	convIDPattern  = `^conv-` + uuid4Pattern + `$`
	// The conversation message endpoints also take "default" (with agent_id) and, deprecated,
	// an agent id: the agent's default thread.
	threadIDPattern = `^(default|conv-` + uuid4Pattern + `|agent-` + uuid4Pattern + `)$`
)

var idPatterns = map[string]*regexp.Regexp{
	agentIDPattern:  regexp.MustCompile(agentIDPattern),
	convIDPattern:   regexp.MustCompile(convIDPattern),
	threadIDPattern: regexp.MustCompile(threadIDPattern),
}

// ValidAgentID reports whether id has the shape of a Letta agent id, "agent-<uuid4>".
func ValidAgentID(id string) bool { return idPatterns[agentIDPattern].MatchString(id) }

// ValidConversationID reports whether id has the shape of a Letta conversation id,
// "conv-<uuid4>".
func ValidConversationID(id string) bool { return idPatterns[convIDPattern].MatchString(id) }

// validPathID answers 422 (FastAPI's pattern mismatch) when the path parameter name does not
// match pattern.
func validPathID(w http.ResponseWriter, name, id, pattern string) bool {
	if idPatterns[pattern].MatchString(id) {
		return true
	}
	writeValidationTyped(w, "string_pattern_mismatch", "String should match pattern '"+pattern+"'", "path", name)
	return false
}

// writeValidationTyped is writeValidation with the error's type.
func writeValidationTyped(w http.ResponseWriter, typ, msg string, loc ...string) {
	writeJSON(w, http.StatusUnprocessableEntity, appendValidationTyped(nil, loc, msg, typ))
}
