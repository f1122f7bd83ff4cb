package queue

// ApprovalClient is approvalClient for the tests in package queue_test,
// which drive queue/httpapi's handlers over a pending approval (a package
// that imports queue cannot be tested from inside it).
var ApprovalClient = approvalClient
