// Command watukuy-worker runs cycles from the asynq queue (package command's worker).
package main

import "github.com/watukuy/watukuy/internal/command"

func main() { command.Execute(command.Worker()) }
