"""Scores of transcripts against references: word error rate (wer), scores by part of a split
(by_part), word-boundary errors of word times (boundaries). Round 5's languages and tasks add their
normalizers here."""
