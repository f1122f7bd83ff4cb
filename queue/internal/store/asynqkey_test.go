package store

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/internal/testredis"
)

// TestAsynqTaskKey: the key lettaq writes a task's result into
// (AsynqTaskKey, with WriteResult) is where the pinned Asynq keeps
// it, on a real Redis, both ways: what Asynq's ResultWriter writes is in
// AsynqTaskKey's hash, and what the script writes there is the result
// Asynq's Inspector reads. An Asynq upgrade that moves the key fails here.
func TestAsynqTaskKey(t *testing.T) {
	srv, ok := testredis.Real(t)
	if !ok {
		t.Skip("needs a real Redis (Asynq's scripts)")
	}
	ctx := context.Background()
	rdb := srv.Client(t)
	qname := fmt.Sprintf("asynqkey-%d", time.Now().UnixNano())
	opt := asynq.RedisClientOpt{Addr: srv.Addr, DB: srv.DB}
	client := asynq.NewClient(opt)
	defer client.Close()
	insp := asynq.NewInspector(opt)
	defer insp.Close()
	defer func() { _ = insp.DeleteQueue(qname, true) }()

	// Asynq writes, lettaq's key reads.
	type seen struct {
		id      string
		exists  int64
		result  string
		hashErr error
	}
	got := make(chan seen, 1)
	s := asynq.NewServer(opt, asynq.Config{Concurrency: 1, Queues: map[string]int{qname: 1},
		LogLevel: asynq.FatalLevel})
	err := s.Start(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		id := task.ResultWriter().TaskID()
		_, err := task.ResultWriter().Write([]byte(`{"via":"ResultWriter"}`))
		if err != nil {
			return err
		}
		var v seen
		v.id = id
		v.exists, v.hashErr = rdb.Exists(ctx, AsynqTaskKey(qname, id)).Result()
		if v.hashErr == nil {
			v.result, v.hashErr = rdb.HGet(ctx, AsynqTaskKey(qname, id), "result").Result()
		}
		got <- v
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	if _, err := client.Enqueue(asynq.NewTask("k", nil), asynq.Queue(qname), asynq.Retention(time.Minute)); err != nil {
		t.Fatal(err)
	}
	var v seen
	select {
	case v = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("the task did not run")
	}
	if v.hashErr != nil || v.exists != 1 || v.result != `{"via":"ResultWriter"}` {
		t.Fatalf("AsynqTaskKey(%q, %q): exists %d, result %q (%v); want Asynq's task hash with the result ResultWriter wrote",
			qname, v.id, v.exists, v.result, v.hashErr)
	}

	// lettaq writes (the script), Asynq reads.
	key := AsynqTaskKey(qname, v.id)
	c := WriteResult.Cmd(ctx, append(WriteResult.Args(1, 1), key, []byte(`{"via":"script"}`)), false)
	_ = rdb.Process(ctx, c)
	wrote, err := c.Int64()
	if err != nil || wrote != 1 {
		t.Fatalf("script: %d, %v", wrote, err)
	}
	info, err := insp.GetTaskInfo(qname, v.id)
	if err != nil {
		t.Fatal(err)
	}
	if string(info.Result) != `{"via":"script"}` {
		t.Fatalf("Inspector reads result %q, want what the script wrote at AsynqTaskKey", info.Result)
	}
}

// TestAsynqKeysInOnePlace: AsynqTaskKey is the only place the queue
// packages spell a key of Asynq's ("asynq:{queue}:…", a private format of
// asynq's internal/base that an upgrade may change; TestAsynqTaskKey checks
// that one).
func TestAsynqKeysInOnePlace(t *testing.T) {
	const queueDir = "../.." // package queue and all under it
	var files []string
	err := filepath.WalkDir(queueDir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, path := range files {
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING && strings.Contains(lit.Value, "asynq:{") && path != filepath.Join(queueDir, "internal", "store", "asynqkey.go") {
				t.Errorf("%s: %s spells a key of Asynq's: use Asynq's API, or AsynqTaskKey", fset.Position(lit.Pos()), lit.Value)
			}
			return true
		})
	}
}
