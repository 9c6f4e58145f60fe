# The three binaries and the packages they are built from, in one place: the README's
# install, the Procfile, CI and the process tests build with these targets.
BIN ?= bin
GOBIN ?= $(shell go env GOPATH)/bin

.PHONY: build install

# build puts watukuy, watukuy-worker and watukuy-scheduler into $(BIN) (default ./bin).
build:
	go build -o $(BIN)/watukuy ./cmd/cli
	go build -o $(BIN)/watukuy-worker ./cmd/worker
	go build -o $(BIN)/watukuy-scheduler ./cmd/scheduler

# install puts them where go install would: $(GOBIN), default $(go env GOPATH)/bin.
install:
	$(MAKE) build BIN=$(GOBIN)
