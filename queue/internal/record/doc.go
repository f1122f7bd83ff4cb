// Package record holds the values a turn's parts pass around and write down:
// the chat a turn belongs to (Conversation), the reply events its chat reads
// (ReplyEvent and its parts, with their JSON form), and what the journal
// keeps of a turn (TurnRecord and its parts). Package queue names each of
// them as a type alias, so that its users see one set of types and the parts
// under queue/internal/ can use them without importing queue.
package record
