package main

import (
	"time"

	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/internal/testbudget"
)

// Config sizes a chaos run.
type Config struct {
	Workers  int           // worker processes (N)
	Chats    int           // chats (M)
	Messages int           // numbered messages per chat (K)
	Duration time.Duration // the window in which the messages are enqueued
	Schedule []Action      // kills, graceful stops and Redis restarts
	Outage   time.Duration // how long Redis stays down per restart
	// Wait bounds how long the run waits, after the window and the
	// schedule, for every turn to end; with takeover off, Asynq recovers a
	// SIGKILLed worker's turns only 60-120 s after the kill.
	Wait time.Duration
	Seed int64
	// Settle bounds how long the run then waits for the queue to hold
	// nothing Asynq could still run.
	Settle time.Duration
	// TakeoverAfter is the workers' LETTAQ_TAKEOVER_AFTER: a killed
	// worker's turns continue elsewhere this long after its last beat
	// (0: off, they wait for Asynq's recovery, 60-70 s here).
	TakeoverAfter time.Duration
	// RedisServer is the redis-server binary; Dir the run's directory
	// (Redis's data, the workers' logs).
	RedisServer string
	Dir         string
}

// DefaultConfig finishes in under 3 minutes on a 2-CPU machine.
func DefaultConfig() Config {
	return Config{
		Workers: 3, Chats: 20, Messages: 4, Duration: 30 * time.Second,
		Schedule: []Action{{KillWorker, 5 * time.Second}, {TermWorker, 12 * time.Second},
			{KillWorker, 18 * time.Second}, {RestartRedis, 24 * time.Second}},
		Outage: 3 * time.Second, Wait: 140 * time.Second, Seed: 1,
		// The killed workers' original tasks stay active in Asynq until its
		// recovery (60-70 s after the kill) ends them: taken over, they end
		// at once and send nothing, which the settled queue then shows.
		Settle:        90 * time.Second,
		TakeoverAfter: 5 * time.Second,
	}
}

// simScale is the simulator's TimeScale: a turn that "thinks" 300 s takes
// 3 s here.
const simScale = 0.01

// simPing is the simulator's keep-alive interval (real time).
const simPing = 40 * time.Millisecond

// chaosBudget is the short-clock budget of the tests and the chaos run (testbudget.Short).
func chaosBudget() budget.Config { return testbudget.Short() }
