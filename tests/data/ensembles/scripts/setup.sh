#!/bin/sh
apt-get update
