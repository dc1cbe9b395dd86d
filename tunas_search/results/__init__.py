"""What a search leaves: its analysis, the selected architecture, reports."""
