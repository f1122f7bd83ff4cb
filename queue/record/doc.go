// Package record holds the records lettaq writes and its users read: the
// events of a chat's reply stream (ReplyEvent and its parts, with their
// JSON form; docs/reply-events.md), what the journal keeps of a turn
// (TurnRecord and its parts, with the names of its stored values), what a
// cancel records (CancelRecord), and the answer to an approval request
// (Answer). Package queue writes and reads them; a relay, a dashboard or a
// test names them here.
package record
