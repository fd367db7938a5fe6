package seat

// PromptTokens counts a prompt with the seat's local tokenizer, for the
// spend a first attempt reserves before anything is observed. It runs
// before an attempt, never inside one's timed window.
func PromptTokens(cfg Config, prompt string) int64 {
	c, err := codecFor(cfg.Model, cfg.Encoding)
	if err != nil {
		return estimateTokens(len(prompt))
	}
	return countTokens(c, prompt)
}
