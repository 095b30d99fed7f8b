//go:build !soundcard

package main

import (
	"errors"

	"github.com/spf13/pflag"
)

// addPlayFlag adds nothing without the soundcard build tag: the default binary never touches a
// sound card.
func addPlayFlag(*pflag.FlagSet) *bool { return new(bool) }

type player interface {
	Play(pcm []int16)
	Close() error
}

func newPlayer() (player, error) {
	return nil, errors.New("built without sound card support (go build -tags soundcard)")
}
