// Command watukuy-scheduler moves due keys into asynq tasks (package command's scheduler).
package main

import "github.com/watukuy/watukuy/internal/command"

func main() { command.Execute(command.Scheduler()) }
