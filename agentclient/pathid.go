package agentclient

import "fmt"

// InvalidIDError is an id that cannot be a Letta id, refused before any
// request is sent: Field names it (agent_id, run_id, conversation_id).
type InvalidIDError struct {
	Op, Field, ID string
}

func (e *InvalidIDError) Error() string {
	return fmt.Sprintf("agentclient: %s: %s %q is not a Letta id (want <prefix>-<uuid>: letters, digits, '-' and '_')", e.Op, e.Field, e.ID)
}

// maxIDBytes bounds an id in a path: Letta's are <prefix>-<uuid>, under 50.
const maxIDBytes = 128

// pathID returns id for a request's path, or an *InvalidIDError when id is
// not shaped like a Letta id. Letta's ids (agent-<uuid4>, run-<uuid4>,
// conv-<uuid4>, …) are letters, digits and '-': a path id is refused when
// it holds anything else ('/', '%', a space, a dot: no dot-segment such as
// ".." can reach the server), so it never needs escaping, and the URL's own
// escaping (url.URL.String, on the path) is the only one.
func pathID(op, field, id string) (string, error) {
	if id == "" || len(id) > maxIDBytes {
		return "", &InvalidIDError{Op: op, Field: field, ID: id}
	}
	for i := 0; i < len(id); i++ {
		switch b := id[i]; {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9', b == '-', b == '_':
		default:
			return "", &InvalidIDError{Op: op, Field: field, ID: id}
		}
	}
	return id, nil
}
