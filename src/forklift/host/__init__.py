"""What is on a node and what runs there, read and driven through a Runner: process control and one probe."""
