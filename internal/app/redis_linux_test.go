package app

import (
	"fmt"
	"os"
	"syscall"
	"testing"
	"unsafe"
)

// On a terminal console logs are coloured, unless NO_COLOR is set.
func TestConsoleColourOnATerminal(t *testing.T) {
	tty := openTerminal(t)
	if !colour(tty, "") {
		t.Error("no colour on a terminal")
	}
	if colour(tty, "1") {
		t.Error("colour on a terminal with NO_COLOR=1")
	}
}

// openTerminal opens the terminal side of a new pseudo-terminal, or skips the test.
func openTerminal(t *testing.T) *os.File {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { ptmx.Close() })
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, ptmx.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Skipf("unlock the pseudo-terminal: %v", e)
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, ptmx.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Skipf("name the pseudo-terminal: %v", e)
	}
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("open the pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { tty.Close() })
	return tty
}
