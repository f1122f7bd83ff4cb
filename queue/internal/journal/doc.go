// Package journal is the turn journal's writing side: a record's JSON and
// the op that saves it with its index entries (Saver), and one attempt's
// record, which the attempt changes under its lock and saves (Attempt).
//
// Reading the journal (queue.Journal's Get, ByOtid, Recent) and the intents
// are package queue's; the keys and scripts are queue/internal/store's.
package journal
