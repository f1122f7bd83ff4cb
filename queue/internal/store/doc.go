// Package store is lettaq's Redis storage behind package queue, on the
// model of Asynq's internal/rdb: the one place that knows lettaq's keys
// (Keys) and the round trips that carry a turn's writes (Op, Run,
// RunFollowed: several steps' writes in one pipeline, in order, scripts
// loaded first).
//
// Package queue keeps the public API (Message, Client, Worker, ReplyEvent
// and the reply reader, the journal's queries, the approval answers) and
// builds its stores on this package.
package store
