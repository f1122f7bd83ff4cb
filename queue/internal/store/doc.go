// Package store is lettaq's Redis storage behind package queue, on the
// model of Asynq's internal/rdb: the one place that knows lettaq's keys
// (Keys) and the round trips that carry a turn's writes (Op, Run,
// RunFollowed: several steps' writes in one pipeline, in order, each
// script's first call that later writes follow sent as EVAL).
//
// The stores: Journal (the turn journal's records, intents, otid keys and
// indexes, and the lookup's bounded scans), Replies (the reply streams,
// their seq counters and markers, and the emit scripts' arguments and
// results), Approvals and Threads; StartStores reads what an attempt
// needs before it runs (its record, intents and final-event marker, its
// chat's pending approval and thread) in one round trip; Trip is a
// writer's round trip (the writes of many turns in one pipeline). Each works on bytes and encoded
// fields: a record's JSON is queue/internal/journal's, an event's stream
// fields are package queue's (Replies).
//
// Package queue keeps the public API (Message, Client, Worker, ReplyEvent
// and the reply reader, the journal's queries, the approval answers) and
// builds its stores on this package.
package store
