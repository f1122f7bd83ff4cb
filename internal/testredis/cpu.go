package testredis

import (
	"context"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// MainCPU is Redis's main-thread CPU time in seconds, user and system
// (INFO cpu; 0 when the server does not report it, as miniredis does). A
// benchmark reads it before and after to report what its commands cost
// Redis: meaningful only on a Redis that nothing else uses meanwhile.
func MainCPU(ctx context.Context, rdb redis.UniversalClient) float64 {
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0
	}
	var s float64
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_user_main_thread" || k == "used_cpu_sys_main_thread" {
			f, _ := strconv.ParseFloat(v, 64)
			s += f
		}
	}
	return s
}
