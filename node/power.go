package main

import (
	"context"
	"errors"
	"strings"

	"github.com/borough-os/borough/internal/pid1"
	"github.com/borough-os/borough/internal/power"
	"github.com/borough-os/borough/internal/supervisor"
)

// powerButton powers the node off cleanly when the power button is pressed.
func powerButton(requests chan<- int) supervisor.Service {
	return supervisor.Service{Name: "power", Run: func(ctx context.Context) error {
		log := supervisor.Logger(ctx)
		buttons, err := power.OpenButtons()
		if errors.Is(err, power.ErrNoButton) {
			log.Warn("no ACPI power button; power off with SIGTERM to process 1")
			return nil
		}
		if err != nil {
			return err
		}
		log.Info("watching power button", "devices", strings.Join(buttons.Devices(), ","))
		return buttons.Watch(ctx, func() {
			log.Info("power button pressed: powering off")
			request(requests, pid1.ExitPoweroff)
		})
	}}
}
