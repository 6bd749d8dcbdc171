"""Slack: slack-bolt's asyncio app in Socket Mode; the channel (`channel`), what arrives in our
shape (`normalise`) and replies in Slack's mrkdwn (`mrkdwn`). Imported only when a Slack channel
is configured."""
