// Package webchat is the web chat page: a small page where a person picks an
// agent and chats with it through lettaq, served as an http.Handler.
//
// Messages go in through the same enqueue path as POST /enqueue
// (queue.Client.Enqueue, integration "web", the chat id kept by the browser,
// a message id minted by the page per message so that a double submit is one
// turn). The chat's reply events come out over Server-Sent Events read from
// the chat's reply stream (queue.Replies), each event's SSE id being its
// stream entry id: a reload, a dropped connection or a second tab resumes
// from Last-Event-ID, or reads the stream from its start, and shows the same
// conversation without a gap or a repeat. The page keeps no history of its
// own; the one thing the stream does not carry, the text of the user's own
// message, is kept beside it (Said).
//
// The handler needs no relay state: it is built from narrow interfaces (an
// Enqueuer, a Stream, an Approver, a Canceller) so that the worker's dev mode
// and the relay serve the same page. Authentication and cross-origin
// protection are the mounting server's (the worker's and the relay's
// listeners put it behind their token).
//
// See docs/webchat.md.
package webchat
