// Package inbound is the message a chat sends in, as a task carries it:
// Message and its JSON form Payload (Decode, Encode), its images, its
// checks (Validate: a *ValidationError naming the field at fault), and the
// ids derived from it (TaskIDFor, OtidFor). Package queue names each as an
// alias (queue.Message, queue.Payload, …), so that the attempt
// (queue/internal/attempt) reads the message without importing queue.
package inbound
