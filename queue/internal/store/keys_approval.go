package store

import "strings"

// ApprovalKeys names the keys of approval requests: a request's record and
// otid key in its task's shard, the pending marker of an agent in a scope.
type ApprovalKeys struct{ keys Keys }

// Request is the pending approval of a request's task.
func (a ApprovalKeys) Request(taskID string) string {
	return a.keys.TaskPrefix(taskID) + "approval:req:" + taskID
}

// Otid maps a request's otid to its task, in shard 0 (with one
// shard: the only one); OtidOf names it in the task's shard.
func (a ApprovalKeys) Otid(otid string) string { return a.OtidIn(0, otid) }

// OtidOf is the otid key of requestTaskID's request.
func (a ApprovalKeys) OtidOf(requestTaskID, otid string) string {
	return a.keys.TaskPrefix(requestTaskID) + "approval:otid:" + otid
}

// OtidIn is otid's request key in shard i.
func (a ApprovalKeys) OtidIn(i int, otid string) string {
	return a.keys.ShardPrefix(i) + "approval:otid:" + otid
}

// Pending is the pending approval of an agent in a scope: in the
// chat's shard for a chat's own conversation (scope
// "chat:<integration>:<chat id>"), under Prefix for a thread that chats
// share.
func (a ApprovalKeys) Pending(agentID, scope string) string {
	p := a.keys.Prefix
	if rest, ok := strings.CutPrefix(scope, "chat:"); ok && a.keys.Sharded() {
		if integration, chatID, ok := strings.Cut(rest, ":"); ok {
			p = a.keys.ChatPrefix(integration, chatID)
		}
	}
	return p + "approval:pending:" + agentID + ":" + scope
}
