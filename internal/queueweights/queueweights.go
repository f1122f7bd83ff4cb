// Package queueweights writes Asynq queue weights as LETTAQ_QUEUES takes
// them, for the worker's logs.
package queueweights

import (
	"sort"
	"strconv"
	"strings"
)

// String writes queue weights as LETTAQ_QUEUES takes them
// ("critical=6,lettaq=1"), highest weight first (ties by name), for logs.
func String(q map[string]int) string {
	names := make([]string, 0, len(q))
	for n := range q {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if q[names[i]] != q[names[j]] {
			return q[names[i]] > q[names[j]]
		}
		return names[i] < names[j]
	})
	for i, n := range names {
		names[i] = n + "=" + strconv.Itoa(q[n])
	}
	return strings.Join(names, ",")
}
