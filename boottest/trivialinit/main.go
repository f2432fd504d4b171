// Command trivialinit is the smallest useful init: it prints the same
// marker as Borough's init and powers off. Booted in place of Borough's
// init, it measures the firmware and kernel floor under Borough's boot
// time (see boottest's BenchmarkBoot).
package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

func main() {
	fmt.Fprintln(os.Stdout, "borough: init started")
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	select {}
}
