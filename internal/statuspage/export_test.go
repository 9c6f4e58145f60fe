package statuspage

import (
	"context"
	"testing"
)

// Browser and NewConsoleLog give the external tests (dev_test.go, which runs the CLI and so
// cannot live in this package) the browser and its error log.
func Browser(t *testing.T) context.Context { return browser(t) }

// ConsoleLog is consoleLog for the external tests.
type ConsoleLog = consoleLog

// Listen is consoleLog.listen; Take is consoleLog.take.
func (c *ConsoleLog) Listen(ctx context.Context, base string) { c.listen(ctx, base) }

// Take returns the errors seen so far.
func (c *ConsoleLog) Take() []string { return c.take() }
