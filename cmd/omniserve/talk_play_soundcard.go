//go:build soundcard

package main

import (
	"errors"
	"fmt"
	"io"
	"os/exec"

	"github.com/spf13/pflag"

	"github.com/omniserve/omniserve/internal/talkclient"
)

// addPlayFlag adds --play: the reply is piped to the system's PCM player as it arrives.
func addPlayFlag(fs *pflag.FlagSet) *bool {
	return fs.Bool("play", false, "play the reply through the sound card (aplay, pw-play or paplay)")
}

type player interface {
	Play(pcm []int16)
	Close() error
}

// pipePlayer feeds 24 kHz s16le to a player process; no cgo, no audio library.
type pipePlayer struct {
	cmd *exec.Cmd
	w   io.WriteCloser
}

func newPlayer() (player, error) {
	rate := fmt.Sprint(talkclient.Rate)
	candidates := [][]string{
		{"aplay", "-q", "-t", "raw", "-f", "S16_LE", "-c", "1", "-r", rate},
		{"pw-play", "--format", "s16", "--channels", "1", "--rate", rate, "-"},
		{"paplay", "--raw", "--format=s16le", "--channels=1", "--rate=" + rate},
	}
	for _, c := range candidates {
		path, err := exec.LookPath(c[0])
		if err != nil {
			continue
		}
		cmd := exec.Command(path, c[1:]...)
		w, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("starting %s: %w", c[0], err)
		}
		return &pipePlayer{cmd: cmd, w: w}, nil
	}
	return nil, errors.New("no PCM player found (install alsa-utils, pipewire or pulseaudio-utils)")
}

func (p *pipePlayer) Play(pcm []int16) { _, _ = p.w.Write(talkclient.Bytes(pcm)) }

func (p *pipePlayer) Close() error {
	_ = p.w.Close()
	return p.cmd.Wait()
}
