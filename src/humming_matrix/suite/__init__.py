"""What one GSM8K run is: data, config, the server, the client, scoring, the runner."""
