package config_test

import (
	"errors"
	"fmt"

	"github.com/watukuy/watukuy/internal/config"
)

func ExampleLoad() {
	env := map[string]string{
		"SHOP_TOKEN":     "s3cr3t",
		"WEBHOOK_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
	}
	cfg, err := config.Load("testdata/full.yaml", func(k string) string { return env[k] })
	if err != nil {
		fmt.Println(err)
		return
	}
	p := cfg.Pollers[0]
	fmt.Println(p.Name, p.Partitions, p.Cursor.Strategy, p.Cursor.Param)
	fmt.Println(p.Request.Headers["Authorization"])
	fmt.Println(p.Schedule.Min, p.Schedule.Max, p.Log.Retention, p.Schema)
	fmt.Println(p.Delivery.Webhook.URL, len(p.Delivery.Webhook.Secrets), p.Delivery.Poison)
	// Output:
	// orders [t_1 t_2] timestamp updated_since
	// Bearer s3cr3t
	// 5s 5m0s 168h0m0s testdata/schemas/order.json
	// https://hooks.example.com/x 1 park
}

func ExampleParse() {
	src := `pollers:
  - name: orders
    request:
      url: https://api.example.com/t/${partition}/orders
    partitions: [t_1]
    cursor:
      strategy: token
      param: cursor
      hasmore: has_more
    delivery:
      stdout: {}
      attempts: "eight"
`
	_, err := config.Parse("watukuy.yaml", []byte(src), nil)
	fmt.Println(err)

	var first *config.Error
	if errors.As(err, &first) {
		fmt.Println(first.Line, first.Column, first.Field)
	}
	// Output:
	// watukuy.yaml:9:7: pollers[0].cursor.hasmore: unknown key "hasmore" (did you mean "hasMore"?)
	// watukuy.yaml:12:17: pollers[0].delivery.attempts: want an integer, got string "eight"
	// 9 7 pollers[0].cursor.hasmore
}
