package deps

import (
	_ "github.com/alicebob/miniredis/v2"
	_ "github.com/google/uuid"
	_ "github.com/hibiken/asynq"
	_ "github.com/hibiken/asynqmon"
	_ "github.com/lmittmann/tint"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/redis/go-redis/v9"
	_ "github.com/santhosh-tekuri/jsonschema/v6"
	_ "go.uber.org/goleak"
	_ "gopkg.in/yaml.v3"
)
